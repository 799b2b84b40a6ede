/**
 * Several agents in one process (no process-global host): each serves calls
 * as itself, shipped code acts as the agent that runs it (nested calls, RRefs
 * made by `new rpc.RRef`), registrations reach every agent, RRefs and their
 * reference counting work across them, and a graceful shutdown of all of them
 * at once completes a nested call in flight.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RemoteError, type Tensor, ones, rpc } from "../../sdk/index.js";
import type { Agent } from "../../sdk/rpc/agent.js";
import { currentAgent } from "../../sdk/rpc/process.js";
import { inProcessGroup, stopInProcessGroup } from "./in_process.js";

// NB: shipped functions run against the SDK namespace, named `tprpc` where they run.
declare const tprpc: typeof import("../../sdk/index.js");

describe("agents in one process", () => {
  let a: Agent, b: Agent, c: Agent;
  beforeAll(async () => {
    [a, b, c] = await inProcessGroup(["a", "b", "c"]);
  }, 20_000);
  afterAll(() => stopInProcessGroup([a, b, c], false), 20_000);

  it("serves each call as the agent it reached, and leaves the process without a current agent", async () => {
    expect(currentAgent()).toBeNull();
    const who = () => tprpc.rpc.getWorkerInfo().name;
    expect(await a.call("b", who, [])).toBe("b");
    expect(await b.call("c", who, [])).toBe("c");
    expect(await c.call(0, who, [])).toBe("a");
    expect(() => rpc.getWorkerInfo()).toThrow(/not been initialized/);
  });

  it("runs nested calls as the worker in the middle", async () => {
    const relay = (to: string) =>
      tprpc.rpc.rpcSync(to, (from: string) => `${from}->${tprpc.rpc.getWorkerInfo().name}`, [
        tprpc.rpc.getWorkerInfo().name,
      ]);
    expect(await a.call("b", relay, ["c"])).toBe("b->c");
    const err = await a
      .call("b", () => tprpc.rpc.rpcSync("c", () => Promise.reject(new RangeError("deep"))), [])
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RemoteError);
    expect((err as RemoteError).message).toMatch(/deep/);
  });

  it("keeps RRefs per agent: an RRef made in a call is owned by the agent serving it", async () => {
    const make = () => {
      const r = new tprpc.rpc.RRef(tprpc.ones([2]).mul(3));
      return [r.ownerName(), r.localValue().sum().item()];
    };
    expect(await a.call("c", make, [])).toEqual(["c", 6]);
    const r = a.remote<Tensor>("b", (x: Tensor) => x.add(1), [ones([2])]);
    expect((await r.toHere()).toArray()).toEqual([2, 2]);
    expect(r.ownerName()).toBe("b");
    expect(await a.call("b", (rr: rpc.RRef<Tensor>) => rr.localValue().sum().item(), [r])).toBe(4);
    expect(b.rrefs.ownedCount).toBeGreaterThanOrEqual(1);
  });

  it("applies rpc.register to every agent of the process", async () => {
    rpc.register("inProcessTriple", (x: number) => 3 * x);
    expect(await a.call("b", "inProcessTriple", [5])).toBe(15);
    expect(await c.call("a", "inProcessTriple", [2])).toBe(6);
  });
});

describe("a graceful shutdown of agents in one process", () => {
  it("completes a nested call between two others that is in flight, then closes all", async () => {
    const [m, w1, w2] = await inProcessGroup(["m", "w1", "w2"]);
    // w1 starts a slow call to w2 and does not wait for it; m's own call returns at once
    const kick = () => {
      void tprpc.rpc
        .rpcAsync("w2", () => new Promise((r) => setTimeout(() => r("done"), 300)), [])
        .then((v) => {
          (globalThis as Record<string, unknown>).inProcessNested = v;
        });
      return "started";
    };
    expect(await m.call("w1", kick, [])).toBe("started");
    const t0 = Date.now();
    await stopInProcessGroup([m, w1, w2]);
    expect((globalThis as Record<string, unknown>).inProcessNested).toBe("done");
    expect(Date.now() - t0).toBeLessThan(5_000);
    await expect(m.call("w1", () => 1, [])).rejects.toThrow(/shut down/);
  }, 20_000);
});
