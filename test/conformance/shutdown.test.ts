/**
 * Shutdown, ported from PyTorch's rpc_test.py: test_local_shutdown, test_local_shutdown_with_rpc,
 * test_wait_all_workers_timeout, test_graceful_shutdown_with_uneven_workload, test_reinit,
 * test_shutdown_followed_by_rpc, test_init_rpc_twice, test_multi_layer_nested_async_rpc and
 * test_handle_send_exceptions; plus a graceful shutdown that must complete a nested call between two
 * other workers, and one that must end promptly after a worker was killed. PyTorch's process-group
 * barriers around these bodies are not needed: the master drives, and `tprpc worker` processes call
 * a graceful shutdown as soon as they have joined, then serve until everyone has.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  RpcError,
  RpcNotInitializedError,
  type Tensor,
  WorkerUnavailableError,
  add,
  ones,
  rpc,
} from "../../sdk/index.js";
import { freePort } from "../../sdk/rpc/launcher.js";
import { type Cluster, startGroup, stopGroup, within, attempt } from "./group.js";

// NB: shipped functions run on the callee against the SDK namespace, named `tprpc` there.
declare const tprpc: typeof import("../../sdk/index.js");

const sleepThen = <T>(ms: number, v: T) => new Promise<T>((resolve) => setTimeout(() => resolve(v), ms));

/** initRpc as rank 0 of a world of one on a fresh port. */
async function initAlone(name: string): Promise<void> {
  const port = await freePort();
  await rpc.initRpc(name, {
    rank: 0,
    worldSize: 1,
    initMethod: `tcp://127.0.0.1:${port}`,
    secret: "conformance-secret-0123456789",
    initTimeoutMs: 5_000,
  });
}

/** Every way of making a call fails with RpcNotInitializedError, PyTorch's "RPC has not been initialized". */
async function expectNotInitialized(): Promise<void> {
  const calls = [
    () => rpc.rpcSync("worker1", add, [ones([2, 2]), ones([2, 2])]),
    () => rpc.rpcAsync("worker1", add, [ones([2, 2]), ones([2, 2])]),
    () => rpc.remote("worker1", add, [ones([2, 2]), ones([2, 2])]).toHere(),
  ];
  for (const call of calls) {
    const e = await attempt(call).then(
      () => expect.fail("the call was made"),
      (err: Error) => err,
    );
    expect(e).toBeInstanceOf(RpcNotInitializedError);
    expect(e.message).toMatch(/^RPC has not been initialized/);
  }
}

describe("shutdown in a world of one", () => {
  afterAll(() => rpc.shutdown({ graceful: false, timeoutMs: 5_000 }));

  it("shuts down right after initRpc without sending anything (test_local_shutdown)", async () => {
    await initAlone("me");
    const t0 = Date.now();
    await within(rpc.shutdown({ graceful: false }), 5_000, "shutdown");
    expect(Date.now() - t0).toBeLessThan(2_000);
    await expectNotInitialized();
  });

  it("shuts down at once after calls, failing the one still pending (test_local_shutdown_with_rpc)", async () => {
    await initAlone("me");
    const ret = await rpc.rpcSync<Tensor>("me", add, [ones([2, 2]), ones([2, 2])]);
    expect(ret.tolist()).toEqual([
      [2, 2],
      [2, 2],
    ]);
    const pending = rpc.rpcAsync("me", sleepThen, [3_000, "late"], { timeoutMs: 20_000 });
    const outcome = pending.then(
      () => null,
      (e: unknown) => e,
    );
    const t0 = Date.now();
    await within(rpc.shutdown({ graceful: false }), 5_000, "shutdown");
    expect(Date.now() - t0).toBeLessThan(1_000);
    expect(await within(outcome, 1_000, "the pending call")).toBeInstanceOf(RpcNotInitializedError);
    await expectNotInitialized();
  });

  it("raises from a graceful shutdown that cannot finish within its timeoutMs (test_wait_all_workers_timeout)", async () => {
    await initAlone("me");
    const pending = rpc.rpcAsync("me", sleepThen, [2_000, "late"], { timeoutMs: 20_000 });
    void pending.catch(() => undefined);
    try {
      const t0 = Date.now();
      const e = await within(rpc.shutdown({ graceful: true, timeoutMs: 100 }), 5_000, "shutdown").then(
        () => expect.fail("the shutdown resolved although its timeout passed with a call outstanding"),
        (err: unknown) => err,
      );
      expect(e).toBeInstanceOf(RpcError);
      expect(Date.now() - t0).toBeLessThan(1_500);
    } finally {
      await rpc.shutdown({ graceful: false, timeoutMs: 5_000 });
    }
  });
});

describe("graceful shutdown of a group of four", () => {
  let cluster: Cluster | undefined;
  beforeAll(async () => {
    cluster = await startGroup({ processes: true });
  }, 40_000);
  afterAll(() => stopGroup(cluster), 20_000);

  it("serves a workload on one worker, then on another (test_graceful_shutdown_with_uneven_workload)", async () => {
    const heavyRpc = (t: Tensor) => {
      for (let i = 1; i < 100; i++) {
        t.mul_(i);
        t.div_(i + 1);
      }
      return 0;
    };
    for (const dst of ["worker1", "worker2"]) {
      const futs = Array.from({ length: 30 }, () => rpc.rpcAsync(dst, heavyRpc, [ones([100, 100])]));
      expect(await within(Promise.all(futs), 30_000, `30 calls to ${dst}`)).toEqual(Array(30).fill(0));
    }
  });

  it("refuses initRpc while initialized, and keeps working (test_reinit)", async () => {
    await expect(rpc.initRpc("master", cluster!.initOptions)).rejects.toThrow(/already initialized/);
    expect(await rpc.rpcSync("worker1", (a: number) => a + 1, [1])).toBe(2);
  });

  it("waits for outstanding calls, then every worker leaves (exit 0)", async () => {
    const pending = rpc.rpcAsync("worker3", sleepThen, [500, "done"]);
    const served = rpc.rpcAsync("worker1", sleepThen, [300, "served"]);
    await within(rpc.shutdown(), 20_000, "the graceful shutdown");
    expect(await within(pending, 1_000, "the outstanding call")).toBe("done");
    expect(await within(served, 1_000, "the outstanding call")).toBe("served");
    const exits = await within(Promise.all(cluster!.workers.map((w) => w.exited)), 10_000, "the workers' exits");
    expect(exits.map((x) => x.code)).toEqual([0, 0, 0]);
  }, 40_000);

  it("fails every call after shutdown with RpcNotInitializedError (test_shutdown_followed_by_rpc)", async () => {
    await expectNotInitialized();
  });
});

describe("a second group after shutdown", () => {
  let cluster: Cluster | undefined;
  afterAll(() => stopGroup(cluster), 20_000);

  it("initRpc again in the same process joins a new group, and calls work (test_init_rpc_twice)", async () => {
    cluster = await startGroup({ processes: true });
    const ret = await rpc.rpcSync<Tensor>("worker1", add, [ones([2, 2]), 1]);
    expect(ret.tolist()).toEqual([
      [2, 2],
      [2, 2],
    ]);
    expect(await rpc.rpcSync("worker2", (a: number) => a * 3, [2])).toBe(6);
  }, 40_000);

  it("completes nested async calls among other workers that are in flight when shutdown starts (test_multi_layer_nested_async_rpc)", async () => {
    // a ring of 20 fire-and-forget hops through every rank; the last hop reports to the master
    let chainDone!: (by: string) => void;
    const done = new Promise<string>((resolve) => (chainDone = resolve));
    rpc.register("conformance.chainDone", (by: string) => chainDone(by));
    function multiLayerNestedAsyncRpc(dst: number, worldSize: number, ttl: number): number | undefined {
      if (ttl > 0) {
        const names = tprpc.rpc.workers().map((w) => w.name);
        void tprpc.rpc
          .rpcAsync(names[dst]!, multiLayerNestedAsyncRpc, [(dst + 1) % worldSize, worldSize, ttl - 1])
          .catch(() => undefined);
        return 0;
      }
      void tprpc.rpc
        .rpcAsync("master", "conformance.chainDone", [tprpc.rpc.getWorkerInfo().name])
        .catch(() => undefined);
      return undefined;
    }
    // worker1 starts a slow call to worker2 and returns at once; it exits 4 if that call fails
    const fireNested = (to: string) => {
      void tprpc.rpc
        .rpcAsync<number>(to, (ms: number) => new Promise((resolve) => setTimeout(() => resolve(42), ms)), [800])
        .then(
          (v) => (v === 42 ? undefined : process.exit(3)),
          () => process.exit(4),
        );
      return "fired";
    };
    // the master's own hop, as PyTorch's rank 0 runs the body: dst 1, world size 4, ttl 20
    const first = rpc.rpcAsync("worker1", multiLayerNestedAsyncRpc, [2, 4, 19]);
    expect(await rpc.rpcSync("worker1", fireNested, ["worker2"])).toBe("fired");
    expect(await within(first, 5_000, "the first hop")).toBe(0);
    await within(rpc.shutdown({ timeoutMs: 20_000 }), 25_000, "the graceful shutdown");
    // the 20th hop ran on rank (1 + 19) % 4 = 0
    const reporter = await within(done, 100, "the chain's report").catch((e: Error) => e.message);
    expect.soft(reporter, "the ring of nested calls completed").toBe("master");
    const exits = await within(Promise.all(cluster!.workers.map((w) => w.exited)), 10_000, "the workers' exits");
    const codes = exits.map((x) => x.code);
    expect.soft(codes, "worker1's call to worker2 completed (worker1 exits 4 if not)").toEqual([0, 0, 0]);
  }, 60_000);
});

describe("shutdown after a worker died", () => {
  let cluster: Cluster | undefined;
  beforeAll(async () => {
    cluster = await startGroup({ workers: 2, processes: true });
  }, 40_000);
  afterAll(() => stopGroup(cluster, false), 20_000);

  it("fails a call to a worker that is gone (test_handle_send_exceptions)", async () => {
    expect(await rpc.rpcSync("worker2", (a: number) => a + 1, [1])).toBe(2);
    const worker2 = cluster!.workers.find((w) => w.name === "worker2")!;
    worker2.process.kill("SIGKILL");
    await within(worker2.exited, 5_000, "worker2's exit");
    const e = await within(rpc.rpcAsync("worker2", add, [ones([1]), 3]), 5_000, "the call").then(
      () => expect.fail("the call to a dead worker succeeded"),
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(WorkerUnavailableError);
    // the live worker still answers
    expect(await rpc.rpcSync("worker1", (a: number) => a + 1, [1])).toBe(2);
  });

  it("ends a graceful shutdown promptly (< 10 s) although a worker was killed", async () => {
    const t0 = Date.now();
    await within(
      rpc.shutdown({ graceful: true, timeoutMs: 12_000 }).catch(() => undefined),
      15_000,
      "the graceful shutdown",
    );
    expect(Date.now() - t0).toBeLessThan(10_000);
    await expectNotInitialized();
    const worker1 = cluster!.workers.find((w) => w.name === "worker1")!;
    await within(worker1.exited, 10_000, "worker1's exit");
  }, 40_000);
});
