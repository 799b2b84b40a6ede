/**
 * Worker identity, ported from PyTorch's rpc_test.py: test_worker_id, test_get_worker_infos,
 * test_worker_info_pickle, test_self_add (the WorkerInfo destination), test_int_callee,
 * test_add_with_id, test_send_to_rank, test_invalid_names, test_world_size_one and
 * test_duplicate_name_2. PyTorch's WorkerInfo constructor check becomes initRpc's name check (JS has
 * no public WorkerInfo constructor); a destination may be a name, a rank or a WorkerInfo.
 */
import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RpcError, RpcNotInitializedError, type Tensor, ValueError, add, ones, rpc, tensor } from "../../sdk/index.js";
import { freePort } from "../../sdk/rpc/launcher.js";
import { startWorker } from "../e2e/workers.js";
import { type Group, startGroup, stopGroup, within, attempt } from "./group.js";

// NB: shipped functions run on the callee against the SDK namespace, named `tprpc` there.
declare const tprpc: typeof import("../../sdk/index.js");

type Mode = "sync" | "async" | "remote";
const MODES: Mode[] = ["sync", "async", "remote"];

/** A destination that is not a name (a rank or a WorkerInfo), as PyTorch accepts it. */
const to = (d: number | rpc.WorkerInfo): string => d as unknown as string;

/** PyTorch's _run_func_in_mode: rpc_sync, rpc_async().wait() or remote().to_here(). */
function runInMode<T>(mode: Mode, dst: string, target: unknown, args: unknown[] = []): Promise<T> {
  return attempt(() =>
    mode === "sync"
      ? rpc.rpcSync<T>(dst, target, args)
      : mode === "async"
        ? rpc.rpcAsync<T>(dst, target, args)
        : rpc.remote<T>(dst, target, args).toHere(),
  );
}

const SECRET = "conformance-secret-0123456789";

/** initRpc as rank 0 of a world of one on a fresh port. */
async function initAlone(name: string): Promise<void> {
  const port = await freePort();
  await rpc.initRpc(name, {
    rank: 0,
    worldSize: 1,
    initMethod: `tcp://127.0.0.1:${port}`,
    secret: SECRET,
    initTimeoutMs: 5_000,
  });
}

describe("worker names (test_invalid_names)", () => {
  afterAll(() => rpc.shutdown({ graceful: false, timeoutMs: 5_000 }));

  it.each([
    ["a character outside the allowed set", "abc*"],
    ["a blank name", " "],
    ["an empty name", ""],
  ])("refuses %s with a ValueError, before joining", async (_what, name) => {
    await expect(initAlone(name)).rejects.toThrow(ValueError);
    expect(() => rpc.getWorkerInfo()).toThrow(RpcNotInitializedError);
  });

  it.each([500, 129])("refuses a name of %i characters (PyTorch: shorter than 128)", async (n) => {
    try {
      await expect(initAlone("a".repeat(n))).rejects.toThrow(ValueError);
      expect(() => rpc.getWorkerInfo()).toThrow(RpcNotInitializedError);
    } finally {
      await rpc.shutdown({ graceful: false, timeoutMs: 5_000 });
    }
  });
});

describe("a world of one (test_world_size_one)", () => {
  afterAll(() => rpc.shutdown({ graceful: false, timeoutMs: 5_000 }));

  it("calls itself by name through rpcSync, rpcAsync and remote", async () => {
    await initAlone("me");
    expect(rpc.workers().map((w) => [w.name, w.id])).toEqual([["me", 0]]);
    const myTensorFunction = (a: Tensor, b: Tensor) => a.add(b);
    for (const mode of MODES) {
      const r = await within(
        runInMode<Tensor>(mode, "me", myTensorFunction, [ones([2, 2]), ones([2, 2])]),
        10_000,
        mode,
      );
      expect(r.tolist()).toEqual([
        [2, 2],
        [2, 2],
      ]);
    }
    await within(rpc.shutdown(), 10_000, "shutdown");
    expect(() => rpc.workers()).toThrow(RpcNotInitializedError);
  });
});

describe("worker info in a group of four", () => {
  let cluster: Group | undefined;
  beforeAll(async () => {
    cluster = await startGroup();
  }, 40_000);
  afterAll(() => stopGroup(cluster), 20_000);

  it("gets this worker's info and a peer's; an unknown name is an error (test_worker_id)", async () => {
    expect(rpc.getWorkerInfo()).toMatchObject({ name: "master", id: 0 });
    expect(rpc.getWorkerInfo("worker1")).toMatchObject({ name: "worker1", id: 1 });
    expect(() => rpc.getWorkerInfo("WorkerUnknown")).toThrow(RpcError);
    expect(() => rpc.getWorkerInfo("WorkerUnknown")).toThrow(/WorkerUnknown/);
    // every rank runs PyTorch's body: each worker sees itself and its successor
    const seen = await Promise.all(
      [1, 2, 3].map((r) =>
        rpc.rpcSync<[string, string, number]>(
          `worker${r}`,
          (peer: string) => {
            const self = tprpc.rpc.getWorkerInfo();
            const other = tprpc.rpc.getWorkerInfo(peer);
            let unknown = "";
            try {
              tprpc.rpc.getWorkerInfo("WorkerUnknown");
            } catch (e) {
              unknown = (e as Error).name;
            }
            return [self.name, other.name, other.id, unknown];
          },
          [r === 3 ? "master" : `worker${r + 1}`],
        ),
      ),
    );
    expect(seen).toEqual([
      ["worker1", "worker2", 2, "WorkerUnavailableError"],
      ["worker2", "worker3", 3, "WorkerUnavailableError"],
      ["worker3", "master", 0, "WorkerUnavailableError"],
    ]);
  });

  it("lists every worker with ids 0..3, on every rank (test_get_worker_infos)", async () => {
    const expected = [
      ["master", 0],
      ["worker1", 1],
      ["worker2", 2],
      ["worker3", 3],
    ];
    expect(rpc.workers().map((w) => [w.name, w.id])).toEqual(expected);
    for (const r of [1, 2, 3]) {
      const there = await rpc.rpcSync(`worker${r}`, () => tprpc.rpc.workers().map((w) => [w.name, w.id]));
      expect(there).toEqual(expected);
    }
  });

  it("sends a WorkerInfo as an argument and gets an equal one back (test_worker_info_pickle)", async () => {
    const info = rpc.getWorkerInfo();
    const identity = (a: unknown) => a;
    expect(await rpc.rpcSync("worker1", identity, [info])).toEqual(info);
    // and a worker's own info, made there
    expect(await rpc.rpcSync("worker2", () => tprpc.rpc.getWorkerInfo())).toEqual(rpc.getWorkerInfo("worker2"));
  });

  it("calls itself through its own WorkerInfo (test_self_add)", async () => {
    const self = rpc.getWorkerInfo();
    const [fut, ret] = await Promise.all([
      rpc.rpcAsync<Tensor>(to(self), add, [ones([2, 2]), 1]),
      rpc.rpcSync<Tensor>(to(self), add, [ones([2, 2]), 1]),
    ]);
    expect(fut.tolist()).toEqual([
      [2, 2],
      [2, 2],
    ]);
    expect(ret.tolist()).toEqual([
      [2, 2],
      [2, 2],
    ]);
  });

  it("takes a rank as the destination (test_int_callee)", async () => {
    const returnCalleeId = () => tprpc.rpc.getWorkerInfo().id;
    expect(await rpc.rpcSync(to(1), returnCalleeId)).toBe(1);
    // every rank: rank r calls rank r+1 by number
    for (const r of [1, 2, 3]) {
      const got = await rpc.rpcSync(
        `worker${r}`,
        (dst: number) =>
          tprpc.rpc.rpcSync(dst as unknown as string, () => tprpc.rpc.getWorkerInfo().id) as Promise<number>,
        [(r + 1) % 4],
      );
      expect(got).toBe((r + 1) % 4);
    }
  });

  it("takes a peer's WorkerInfo as the destination (test_add_with_id)", async () => {
    const n = 1;
    const info = rpc.getWorkerInfo("worker1");
    const ret = await rpc.rpcSync<Tensor>(to(info), add, [ones([n, n]), ones([n, n])]);
    expect(ret.tolist()).toEqual([[2]]);
  });

  it("sends to a rank through rpcSync, rpcAsync and remote (test_send_to_rank)", async () => {
    for (const mode of MODES) {
      const ret = await within(runInMode<Tensor>(mode, to(1), add, [ones([2, 2]), 1]), 10_000, mode);
      expect(ret.tolist()).toEqual([
        [2, 2],
        [2, 2],
      ]);
    }
  });

  it("refuses ranks outside the group and non-integer ranks (test_send_to_rank)", async () => {
    const x = tensor([1, 2]);
    for (const mode of MODES) {
      // NB: PyTorch raises RuntimeError for a rank it has no worker for, ValueError for a fraction.
      await expect(runInMode(mode, to(4 + 1), add, [x, 1])).rejects.toThrow(RpcError);
      await expect(runInMode(mode, to(-1), add, [x, 1])).rejects.toThrow(RpcError);
      await expect(runInMode(mode, to(1 + 0.5), add, [x, 1])).rejects.toThrow(ValueError);
      await expect(runInMode(mode, to(1 - 0.5), add, [x, 1])).rejects.toThrow(ValueError);
    }
    // nothing was left behind: the group still answers
    expect(await rpc.rpcSync("worker1", (a: number) => a + 1, [1])).toBe(2);
  });
});

describe("duplicate worker names (test_duplicate_name_2)", () => {
  const children: ChildProcess[] = [];
  afterAll(async () => {
    await rpc.shutdown({ graceful: false, timeoutMs: 5_000 });
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  });

  it("fails initRpc on every rank, quickly, when a worker reuses the master's name", async () => {
    const port = await freePort();
    // ranks 1 and 2 are "worker1" and "master": the master's name twice, as PyTorch's rank % (world_size - 1)
    children.push(
      startWorker("worker1", 1, 3, port, { secret: SECRET }),
      startWorker("master", 2, 3, port, { secret: SECRET }),
    );
    const exits = children.map((c) => new Promise<number | null>((resolve) => c.once("exit", (code) => resolve(code))));
    const t0 = Date.now();
    const init = rpc.initRpc("master", {
      rank: 0,
      worldSize: 3,
      initMethod: `tcp://127.0.0.1:${port}`,
      secret: SECRET,
      initTimeoutMs: 10_000,
    });
    const outcome = init.then(
      () => null,
      (e: unknown) => e,
    );
    try {
      const err = await within(outcome, 6_000, "the master's initRpc");
      expect(err).toBeInstanceOf(Error);
      expect((err as Error).message).toMatch(/unique/);
      // every other rank fails too (a worker whose initRpc fails exits 1), well before the init timeout
      const codes = await within(Promise.all(exits), Math.max(1, 6_000 - (Date.now() - t0)), "the workers' exits");
      expect(codes).toEqual([1, 1]);
    } finally {
      await outcome; // NB: bounded by initTimeoutMs; leaves no init in flight for later suites
    }
  }, 40_000);
});
