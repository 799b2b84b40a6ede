/**
 * Fetching an RRef argument's value ahead (sdk/rpc/fetch_ahead.ts), in an in-process group (master +
 * worker1, worker2): a call on worker2 that receives an RRef owned by worker1 asks for the value as it
 * arrives; the first toHere() in the same distributed autograd context takes it, so the owner is
 * asked once. The owner declines anything but small tensors, and the call then fetches as before.
 * worker2's agent.fetch is spied on (its 4th argument says whether a fetch is one ahead).
 */
import sinon from "sinon";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import * as sdk from "../../sdk/index.js";
import { type Tensor, distAutograd, rpc } from "../../sdk/index.js";
import type { Agent } from "../../sdk/rpc/agent.js";
import { fetchAheadBytes, fitsAhead } from "../../sdk/rpc/fetch_ahead.js";
import type { RRefHost } from "../../sdk/rpc/rref.js";
import { RRefContext } from "../../sdk/rpc/rref_context.js";
import { type InProcessGroup, startGroup, stopGroup } from "../conformance/group.js";

// NB: shipped sources name `tprpc`, which the callee binds to its SDK
const tprpc = sdk;

describe("fetchAheadBytes and fitsAhead", () => {
  it("reads TPRPC_RREF_FETCH_AHEAD_BYTES: 4 MiB by default, 0 turns it off, bad values fall back", () => {
    expect(fetchAheadBytes({})).toBe(4 << 20);
    expect(fetchAheadBytes({ TPRPC_RREF_FETCH_AHEAD_BYTES: "0" })).toBe(0);
    expect(fetchAheadBytes({ TPRPC_RREF_FETCH_AHEAD_BYTES: "65536" })).toBe(65536);
    for (const bad of ["-1", "1.5", "abc", String(2 ** 31)])
      expect(fetchAheadBytes({ TPRPC_RREF_FETCH_AHEAD_BYTES: bad })).toBe(4 << 20);
  });

  it("takes a tensor or an array of at most 16 tensors within the byte limit, nothing else", () => {
    const t = sdk.ones([4, 4]); // 64 bytes
    expect(fitsAhead(t, 64)).toBe(true);
    expect(fitsAhead(t, 63)).toBe(false);
    expect(fitsAhead([t, t], 128)).toBe(true);
    expect(fitsAhead([t, t], 127)).toBe(false);
    expect(
      fitsAhead(
        Array.from({ length: 17 }, () => t),
        1 << 20,
      ),
    ).toBe(false);
    expect(fitsAhead(sdk.ones([2], { dtype: "float64" }), 16)).toBe(true);
    for (const v of [[], [t, 1], { t }, 3, null, undefined, "x"]) expect(fitsAhead(v, 1 << 20)).toBe(false);
    expect(fitsAhead(t, 0)).toBe(false);
  });
});

describe("RRefContext.valueKnown (the owner's test before it answers a fetch ahead)", () => {
  it("counts a REMOTE_CALL that arrived and waits in the serve queue, not an id known only from a fork request", () => {
    const ctx = new RRefContext(() => ({ name: "worker1" }) as unknown as RRefHost);
    expect(ctx.valueKnown("master:1")).toBe(false);
    ctx.addFork("master:2", "master:3", "worker2");
    expect(ctx.valueKnown("master:2")).toBe(false);
    ctx.remoteQueued("master:1");
    expect(ctx.valueKnown("master:1")).toBe(true);
  });
});

describe("fetching RRef arguments ahead (in-process group)", () => {
  let group: InProcessGroup;
  let worker2: Agent;
  let fetch: sinon.SinonSpy;

  beforeAll(async () => {
    group = await startGroup({ workers: 2 });
    worker2 = group.agents[1]!;
    // NB: opens the pipes master -> worker1, master -> worker2 and worker2 -> worker1 first, so a remote()'s
    // REMOTE_CALL is written at once and reaches worker1 before worker2's fetch ahead (else worker1 declines it)
    await rpc.rpcSync("worker1", tprpc.ones, [[1]]);
    await rpc.rpcSync("worker2", () => tprpc.rpc.rpcSync("worker1", tprpc.ones, [[1]]));
  }, 30_000);
  afterAll(() => stopGroup(group), 30_000);
  afterEach(() => sinon.restore());

  const spyFetch = () => (fetch = sinon.spy(worker2, "fetch"));
  /** Whether each fetch worker2 made was one ahead. */
  const kinds = () => fetch.getCalls().map((c) => c.args[3] === true);

  it("serves the call's toHere() from the fetch ahead: the owner is asked once, and the value is the owner's", async () => {
    spyFetch();
    // NB: the owner makes the value slowly, so the fetch ahead waits for it there
    const slowOnes = async (n: number) => {
      await new Promise((r) => setTimeout(r, 100));
      return tprpc.ones([n, n]).mul(2);
    };
    const x = rpc.remote<Tensor>("worker1", slowOnes, [4]);
    const sum = await rpc.rpcSync<number>("worker2", async (r: rpc.RRef<Tensor>) => (await r.toHere()).sum().item(), [
      x,
    ]);
    expect(sum).toBe(32);
    expect(kinds()).toEqual([true]);
    expect(fetch.firstCall.args[0]).toBe("worker1");
  });

  it("fetches again for a second toHere() (the value fetched ahead serves the first only)", async () => {
    spyFetch();
    const x = rpc.remote<Tensor>("worker1", tprpc.ones, [[3]]);
    const sums = await rpc.rpcSync<number[]>(
      "worker2",
      async (r: rpc.RRef<Tensor>) => [(await r.toHere()).sum().item(), (await r.toHere()).sum().item()],
      [x],
    );
    expect(sums).toEqual([3, 3]);
    expect(kinds()).toEqual([true, false]);
  });

  it("is declined for a value that is not a tensor, and for a tensor over the byte limit: toHere fetches as before", async () => {
    spyFetch();
    const obj = rpc.remote<{ a: number }>("worker1", (a: number) => ({ a }), [7]);
    const a = await rpc.rpcSync<number>("worker2", async (r: rpc.RRef<{ a: number }>) => (await r.toHere()).a, [obj]);
    expect(a).toBe(7);
    expect(kinds()).toEqual([true, false]);
    fetch.resetHistory();
    // 1100 x 1000 float32: 4.4 MB, over the 4 MiB default
    const big = rpc.remote<Tensor>("worker1", tprpc.ones, [[1100, 1000]]);
    const n = await rpc.rpcSync<number>("worker2", async (r: rpc.RRef<Tensor>) => (await r.toHere()).numel(), [big]);
    expect(n).toBe(1_100_000);
    expect(kinds()).toEqual([true, false]);
  });

  it("is not used by a toHere() given its own timeout", async () => {
    spyFetch();
    const x = rpc.remote<Tensor>("worker1", tprpc.ones, [[2]]);
    const s = await rpc.rpcSync<number>(
      "worker2",
      async (r: rpc.RRef<Tensor>) => (await r.toHere(5_000)).sum().item(),
      [x],
    );
    expect(s).toBe(2);
    expect(kinds()).toEqual([true, false]);
    expect(fetch.secondCall.args[2]).toBe(5_000);
  });

  it("a failed remote(): the fetch ahead fails quietly and toHere raises the creation's error", async () => {
    spyFetch();
    const boom = rpc.remote<Tensor>(
      "worker1",
      () => {
        throw new TypeError("made to fail");
      },
      [],
    );
    const msg = await rpc.rpcSync<string>(
      "worker2",
      async (r: rpc.RRef<Tensor>) => {
        try {
          await r.toHere();
          return "no error";
        } catch (e) {
          return (e as Error).message;
        }
      },
      [boom],
    );
    expect(msg).toMatch(/made to fail/);
    // NB: worker2 may learn of the failure from the fetch ahead or from the regular fetch; it asks at most twice
    expect(kinds()[0]).toBe(true);
    expect(kinds().length).toBeLessThanOrEqual(2);
  });

  it("in a distributed autograd context, the value fetched ahead carries the gradient back to its owner", async () => {
    spyFetch();
    await distAutograd.context(async (id) => {
      const t = tprpc.ones([2, 2], { requiresGrad: true });
      const x = rpc.remote<Tensor>("worker1", tprpc.mul, [t, 3]);
      const loss = await rpc.rpcSync<Tensor>("worker2", async (r: rpc.RRef<Tensor>) => (await r.toHere()).sum(), [x]);
      await distAutograd.backward(id, [loss]);
      expect(distAutograd.getGradients(id).get(t)!.toArray()).toEqual([3, 3, 3, 3]);
    });
    expect(kinds()).toEqual([true]);
  });

  it("is not used in another distributed autograd context than the call's: toHere fetches in its own", async () => {
    spyFetch();
    // NB: the call comes with no context; its target opens one (contexts do not nest), so the scopes differ
    const x = rpc.remote<Tensor>("worker1", tprpc.ones, [[2]]);
    const sum = await rpc.rpcSync<number>(
      "worker2",
      async (r: rpc.RRef<Tensor>) => tprpc.distAutograd.context(async () => (await r.toHere()).sum().item()),
      [x],
    );
    expect(sum).toBe(2);
    expect(kinds()).toEqual([true, false]);
  });

  it("is not used after a method call through the RRef's proxies: toHere() then sees the owner's changed value", async () => {
    spyFetch();
    const x = rpc.remote<Tensor>("worker1", tprpc.zeros, [[2]]);
    const sum = await rpc.rpcSync<number>(
      "worker2",
      async (r: rpc.RRef<Tensor>) => {
        await r.rpcSync().add_(5);
        return (await r.toHere()).sum().item();
      },
      [x],
    );
    expect(sum).toBe(10);
    expect(kinds()).toEqual([true, false]);
  });

  it("is dropped when the call that brought the RRef finishes: a later call's toHere() fetches the value then", async () => {
    spyFetch();
    const key = "__fetchAheadStash";
    const x = rpc.remote<Tensor>("worker1", tprpc.zeros, [[3]]);
    await rpc.rpcSync(
      "worker2",
      (r: rpc.RRef<Tensor>, k: string) => void ((globalThis as Record<string, unknown>)[k] = r),
      [x, key],
    );
    await x.rpcSync().add_(1);
    const sum = await rpc.rpcSync<number>(
      "worker2",
      async (k: string) =>
        (await ((globalThis as Record<string, unknown>)[k] as rpc.RRef<Tensor>).toHere()).sum().item(),
      [key],
    );
    delete (globalThis as Record<string, unknown>)[key];
    expect(sum).toBe(3);
    expect(kinds()).toEqual([true, false]);
  });

  it("fetches once per RRef id when a call carries the same RRef twice", async () => {
    spyFetch();
    const x = rpc.remote<Tensor>("worker1", tprpc.ones, [[2]]);
    const sum = await rpc.rpcSync<number>(
      "worker2",
      async (a: rpc.RRef<Tensor>, b: rpc.RRef<Tensor>) =>
        (await a.toHere())
          .add(await b.toHere())
          .sum()
          .item(),
      [x, x],
    );
    expect(sum).toBe(4);
    expect(kinds()).toEqual([true, false]);
  });

  it("a value fetched ahead and never read leaves the distributed backward pass complete and correct", async () => {
    spyFetch();
    await distAutograd.context(async (id) => {
      const t = tprpc.ones([2], { requiresGrad: true });
      const x = rpc.remote<Tensor>("worker1", tprpc.mul, [t, 3]);
      const u = tprpc.ones([2], { requiresGrad: true });
      // NB: the call ignores its RRef argument; its result depends on u only
      const y = await rpc.rpcSync<Tensor>("worker2", (_r: rpc.RRef<Tensor>, v: Tensor) => v.mul(2), [x, u]);
      await distAutograd.backward(id, [y.sum()]);
      const grads = distAutograd.getGradients(id);
      expect(grads.get(u)!.toArray()).toEqual([2, 2]);
      expect(grads.has(t)).toBe(false);
    });
    expect(kinds()).toEqual([true]);
  });
});
