/**
 * Distributed backward when things go wrong, with real worker processes
 * (master + worker1 + worker2, worker1 calling worker2 inside forward):
 * an error thrown in worker2's part of backward rejects the master's
 * backward with that error; worker2 killed (SIGKILL) while it runs its part
 * rejects the master's backward with WorkerUnavailableError within 2 s, and
 * afterwards no context is left on any live worker; a worker that dies
 * holding a context it started takes that context off the survivors.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RemoteError, type Tensor, WorkerUnavailableError, distAutograd, rpc } from "../../sdk/index.js";
import { type Cluster, startGroup, stopGroup, within } from "../dist_autograd/group.js";
import { gen } from "../dist_autograd/models.js";
import { settled } from "../helpers.js";

describe("distributed backward failures", () => {
  let cluster: Cluster | undefined;

  beforeAll(async () => {
    cluster = await startGroup(2, "dist-failure-secret-0123456789");
    await rpc.rpcSync("worker1", "dist.setLeaf", ["a", gen(2, [3], 0.8)]);
    await rpc.rpcSync("worker2", "dist.setLeaf", ["b", gen(3, [3], 0.6)]);
  }, 60_000);

  afterAll(async () => {
    await stopGroup(cluster, false);
  }, 30_000);

  const liveCounts = () =>
    Promise.all([distAutograd.contextCount(), rpc.rpcSync<number>("worker1", "dist.contextCount")]);

  it("rejects backward with the error a remote part of it threw, and cleans up", async () => {
    const x = gen(1, [3], 1.0, true);
    const err = await distAutograd
      .context(async (ctxId) => {
        const y = await rpc.rpcSync<Tensor>("worker1", "dist.nestedOuter", [x, "dist.throwingInner"]);
        await within(distAutograd.backward(ctxId, [y.sum()]), 20_000, "backward");
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RemoteError);
    expect((err as RemoteError).remoteName).toBe("RangeError");
    expect((err as Error).message).toMatch(/fails on purpose/);
    // NB: context() sends the release without awaiting it (as PyTorch's context manager)
    expect(await settled(liveCounts, [0, 0])).toEqual([0, 0]);
    // NB: worker2 hears of the release from worker1 (the master never called it), after context() returned
    expect(await settled(() => rpc.rpcSync<number>("worker2", "dist.contextCount"), 0)).toBe(0);
  });

  it("rejects backward with WorkerUnavailableError within 2 s of a worker dying in it, leaving no context behind", async () => {
    const x = gen(1, [3], 1.0, true);
    const worker2 = cluster!.workers.find((w) => w.name === "worker2")!;
    let killedAt = 0;
    let rejectedAt = 0;
    const err = await distAutograd
      .context(async (ctxId) => {
        const y = await rpc.rpcSync<Tensor>("worker1", "dist.nestedOuter", [x, "dist.slowInner"]);
        const pass = distAutograd.backward(ctxId, [y.sum()]);
        // worker2's part busy-waits 4 s in a gradient hook: kill it in the middle
        await new Promise((r) => setTimeout(r, 700));
        killedAt = performance.now();
        worker2.process.kill("SIGKILL");
        await within(pass, 10_000, "backward").finally(() => (rejectedAt = performance.now()));
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkerUnavailableError);
    expect((err as WorkerUnavailableError).workerName).toBe("worker2");
    const ms = rejectedAt - killedAt;
    process.stdout.write(`backward rejected ${ms.toFixed(0)} ms after worker2 was killed\n`);
    expect(ms).toBeLessThan(2_000);
    expect(await settled(liveCounts, [0, 0])).toEqual([0, 0]);
  });

  it("drops the contexts a dead worker started from the live workers", async () => {
    const ctxId = await rpc.rpcSync<number>("worker1", "dist.openContextWith", ["master"]);
    expect(distAutograd.contextCount()).toBe(1);
    expect(Math.floor(ctxId / 2 ** 32)).toBe(rpc.getWorkerInfo("worker1").id);
    cluster!.workers.find((w) => w.name === "worker1")!.process.kill("SIGKILL");
    expect(await settled(() => distAutograd.contextCount(), 0, 10_000)).toBe(0);
  });
});
