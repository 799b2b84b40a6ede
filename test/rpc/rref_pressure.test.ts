/**
 * RRefContext's collection requests (protocol step 5) with a fake host: holders that left the group
 * are not asked (and never make own() throw), forks they held are dropped when they leave, and an
 * owner fork whose holder is unknown makes the owner ask every member.
 */
import { describe, expect, it } from "vitest";

describe("RRef collection requests", () => {
  it("asks only current members, never throws for a departed holder, and drops its forks", async () => {
    process.env.TPRPC_RREF_COLLECT_BYTES = String(1 << 20);
    const { RRefContext } = await import("../../sdk/rpc/rref_context.js");
    // NB: read once at import; later test files in this fork must not inherit it
    delete process.env.TPRPC_RREF_COLLECT_BYTES;
    const asked: string[] = [];
    let members = ["w1", "w2"];
    const host = {
      name: "owner",
      peerNames: () => members,
      notify(to: string, kind: string) {
        // like the agent's peer() for an unknown worker, but synchronous: the context must not call it
        if (!members.includes(to)) throw new Error(`unknown worker "${to}"`);
        if (kind === "collect") asked.push(to);
        return Promise.resolve();
      },
    };
    const ctx = new RRefContext(() => host as never);
    ctx.own("r1", Promise.resolve(1), "f1", "w1");
    ctx.own("r2", Promise.resolve(2), "f2", "gone");
    expect(ctx.ownedCount).toBe(2);
    // grow external memory well past 1 MiB, then make a value after the 10 ms sampling interval
    const ballast = Buffer.alloc(64 << 20, 1);
    await new Promise((r) => setTimeout(r, 20));
    expect(() => ctx.own("r3", Promise.resolve(3), "f3", "w1")).not.toThrow();
    expect(asked).toEqual(["w1"]);
    expect(ctx.collectRequests).toBe(1);
    ctx.holderLeft("gone");
    expect(ctx.ownedCount).toBe(2);
    // an owner fork sent to an unknown receiver: the next round (after its 1 s limit) asks every member
    ctx.addFork("r1", "f4", "");
    members = ["w1", "w2"];
    await new Promise((r) => setTimeout(r, 1_050));
    const more = Buffer.alloc(64 << 20, 2);
    asked.length = 0;
    ctx.own("r5", Promise.resolve(5), "f5", "w1");
    expect(asked.sort()).toEqual(["w1", "w2"]);
    expect(ballast[0]! + more[0]!).toBe(3);
  });
});
