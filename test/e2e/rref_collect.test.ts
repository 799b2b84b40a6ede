/**
 * Step 5 of the RRef protocol with real processes: a master that makes many
 * short-lived RRefs to large values on a worker, and drops them, while it
 * allocates little itself (so V8 has no reason to run the full collection
 * that would finalize them). The owner's memory grows; it asks the master to
 * collect (RREF_COLLECT); the master's collection runs the RRefs' finalizers
 * and the owner frees the values. Without step 5 every value stays owned.
 */
import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rpc, zeros, type Tensor } from "../../sdk/index.js";
import { requestedCollections } from "../../sdk/rpc/gc.js";
import { freePort, startWorker } from "./workers.js";

const SECRET = "rref-collect-secret-0123456789";
const VALUES = 40;
const VALUE_BYTES = 16 << 20;

/** Makes one RRef to a fresh 16 MiB tensor on worker1, waits until the owner has it, and drops it. */
async function makeAndDrop(): Promise<void> {
  const r = rpc.remote<Tensor>("worker1", zeros, [[VALUE_BYTES / 4]]);
  expect(await r.rpcSync().numel()).toBe(VALUE_BYTES / 4);
}

describe("owners ask the holders of their RRefs to collect garbage", () => {
  let worker: ChildProcess;

  beforeAll(async () => {
    const port = await freePort();
    // NB: the worker has no --expose-gc: gc.ts takes V8's gc() itself
    worker = startWorker("worker1", 1, 2, port, {
      secret: SECRET,
      env: { TPRPC_RREF_COLLECT_BYTES: String(64 << 20) },
    });
    await rpc.initRpc("master", {
      rank: 0,
      worldSize: 2,
      initMethod: `tcp://127.0.0.1:${port}`,
      secret: SECRET,
      initTimeoutMs: 20_000,
    });
  }, 30_000);

  afterAll(async () => {
    await rpc.shutdown({ timeoutMs: 10_000 });
    if (worker.exitCode === null) worker.kill("SIGKILL");
  });

  it("keeps the owner's live values bounded while the master drops 640 MiB of RRefs", async () => {
    const ownedOnWorker = () => rpc.rpcSync<number>("worker1", () => tprpc.rpc.ownedRRefCount());
    const roundsOnWorker = () =>
      rpc.rpcSync<number>(
        "worker1",
        () => (tprpc.rpc.currentAgent() as { rrefs: { collectRequests: number } }).rrefs.collectRequests,
      );
    const base = await ownedOnWorker();
    const collectionsBefore = requestedCollections();
    let most = 0;
    for (let i = 0; i < VALUES; i++) {
      await makeAndDrop();
      most = Math.max(most, (await ownedOnWorker()) - base);
      // NB: spread over ~3 s, past the owner's one-request-a-second limit
      await new Promise((r) => setTimeout(r, 75));
    }
    console.log(
      `[rref_collect] at most ${most} of ${VALUES} values owned at once; the owner asked ${await roundsOnWorker()} times`,
    );
    expect(await roundsOnWorker()).toBeGreaterThanOrEqual(2);
    expect(requestedCollections()).toBeGreaterThan(collectionsBefore);
    // 64 MiB is four values; a request a second at ~10 values a second
    expect(most).toBeLessThanOrEqual(24);
  }, 60_000);
});

// NB: the SDK namespace as shipped functions see it on the worker
declare const tprpc: { rpc: { ownedRRefCount(): number; currentAgent(): unknown } };
