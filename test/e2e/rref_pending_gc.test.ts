/**
 * A call whose RRef arguments wait for their owner's confirmation survives a garbage collection
 * in that wait (issue 23: bench --e2e's pipelined GPT hung, the master's call to worker2 waiting its
 * whole rpcTimeoutMs with no error anywhere).
 *
 * The interleaving, forced on real processes: the master sends worker2 a call with a user RRef
 * owned by worker1 while worker1 computes, so worker1 reads worker2's fork request (and confirms
 * the fork) only after that computation. Meanwhile worker2 runs a full garbage collection. Before
 * the fix the received RRef was held only weakly (RRefContext.liveUsers) and the call waiting for
 * it only through the RRef's own confirmation callbacks: the collection took both. The fork was
 * then deleted at its owner, the owner's confirmation found no RRef, and the call was never run nor
 * answered. Now a received user RRef is held until its owner confirmed it (as PyTorch's pending
 * users), so the call runs once worker1 is done.
 */
import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rpc } from "../../sdk/index.js";
import { freePort, startWorker } from "./workers.js";

const SECRET = "rref-pending-gc-secret-0123456789";
const BUSY_MS = 1500;

/** Shipped to worker1: computes (spins) for `ms`. */
const busy = (ms: number): null => {
  const t0 = performance.now();
  while (performance.now() - t0 < ms);
  return null;
};

/** Shipped to worker2: a full collection, twice, with a turn between for finalizers. */
const collect = async (): Promise<null> => {
  const gc = (globalThis as { gc?: () => void }).gc!;
  gc();
  await new Promise((r) => setTimeout(r, 20));
  gc();
  return null;
};

describe("a call waiting for its RRef arguments' confirmation", () => {
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    const port = await freePort();
    for (const [i, n] of ["worker1", "worker2"].entries())
      children.push(startWorker(n, i + 1, 3, port, { secret: SECRET, nodeArgs: ["--expose-gc"] }));
    await rpc.initRpc("master", { rank: 0, worldSize: 3, initMethod: `tcp://127.0.0.1:${port}`, secret: SECRET });
    // warm up: pipes open both ways, code shipped
    await rpc.rpcSync("worker1", busy, [0]);
    await rpc.rpcSync("worker2", collect, []);
    const h = rpc.remote<number>("worker1", (x: number) => x, [1]);
    await rpc.rpcSync("worker2", (r: rpc.RRef<number>) => r.toHere(), [h]);
  }, 30_000);

  afterAll(async () => {
    await rpc.shutdown({ timeoutMs: 10_000 }).catch(() => undefined);
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  });

  it("runs after a full GC on the callee while the owner has not confirmed the fork yet", async () => {
    const h = rpc.remote<number>("worker1", (x: number) => x * 2, [21]);
    await h.toHere();
    const owner = rpc.rpcAsync("worker1", busy, [BUSY_MS]);
    // NB: worker1 is computing now: worker2's fork request waits in its socket until it is done
    await new Promise((r) => setTimeout(r, 100));
    const call = rpc.rpcAsync("worker2", (r: rpc.RRef<number>) => r.toHere().then((v) => v + 1), [h], {
      timeoutMs: BUSY_MS + 8_000,
    });
    await new Promise((r) => setTimeout(r, 200));
    await rpc.rpcSync("worker2", collect, []);
    await owner;
    expect(await call).toBe(43);
  }, 30_000);

  it("keeps the RRef of a waiting call alive, not only weakly", async () => {
    const h = rpc.remote<number>("worker1", (x: number) => x, [5]);
    await h.toHere();
    const owner = rpc.rpcAsync("worker1", busy, [BUSY_MS / 2]);
    await new Promise((r) => setTimeout(r, 100));
    const calls = [0, 1, 2, 3].map((i) =>
      rpc.rpcAsync("worker2", (r: rpc.RRef<number>, k: number) => r.toHere().then((v) => v + k), [h, i], {
        timeoutMs: BUSY_MS + 8_000,
      }),
    );
    await rpc.rpcSync("worker2", collect, []);
    await owner;
    expect(await Promise.all(calls)).toEqual([5, 6, 7, 8]);
  }, 30_000);
});
