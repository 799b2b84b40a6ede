/**
 * allReduce through shared memory between processes on one host (sdk/distributed/host_shm.ts):
 * the native reduction kernel against plain JS, then 4 real worker processes on 127.0.0.1 where
 * the shared-memory algorithm's results must equal the pipes' (ring and direct) and a plain
 * reduction bit for bit, for every op and dtype, odd sizes, several chunks (64 KiB halves here),
 * strided tensors and a subgroup; a set-up that fails on one member falls back everywhere; a peer
 * killed mid-collective fails the others with WorkerUnavailableError.
 */
import fs from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as sdk from "../../sdk/index.js";
import { rpc } from "../../sdk/index.js";
import { nativeChannels } from "../../sdk/native/channels.js";
import { type Cluster, startGroup, stopGroup, within } from "../conformance/group.js";

declare const tprpc: typeof import("../../sdk/index.js");
(globalThis as Record<string, unknown>).tprpc = sdk;

const native = nativeChannels();

describe.skipIf(!native)("reduceN, the native kernel", () => {
  it("reduces in list order for every op and typed array kind, NaN propagating, integers wrapping", () => {
    const n = 70_001; // NB: above the kernel's parallel grain, and odd
    const kinds = [Float32Array, Float64Array, Int32Array, Uint8Array] as const;
    const ops: [number, (a: number, b: number) => number][] = [
      [0, (a, b) => a + b],
      [1, (a, b) => a * b],
      [2, (a, b) => (a > b || Number.isNaN(a) ? a : b)],
      [3, (a, b) => (a < b || Number.isNaN(a) ? a : b)],
    ];
    for (const K of kinds)
      for (const [op, f] of ops) {
        const ins = [0, 1, 2].map((r) => {
          const a = new K(n);
          for (let i = 0; i < n; i++) a[i] = ((i * 7 + r * 13) % 11) - 3;
          return a;
        });
        if (K === Float32Array) ins[1]![5] = NaN;
        if (K === Int32Array) ins[0]![6] = 2 ** 31 - 1;
        const out = new K(n);
        native!.reduceN(op, out, ins);
        const want = new K(n);
        for (let i = 0; i < n; i++) want[i] = f(f(ins[0]![i]!, ins[1]![i]!), ins[2]![i]!);
        expect(Array.from(out)).toEqual(Array.from(want));
      }
    const big = [BigInt64Array.of(2n ** 62n, 5n), BigInt64Array.of(2n ** 62n, -7n)];
    const out = new BigInt64Array(2);
    native!.reduceN(0, out, big);
    expect(Array.from(out)).toEqual([-(2n ** 63n), -2n]);
    const acc = Float32Array.of(1, 2, 3);
    native!.reduceN(0, acc, [acc, Float32Array.of(10, 20, 30)]); // out may be an input
    expect(Array.from(acc)).toEqual([11, 22, 33]);
    const last = Float64Array.from({ length: 5000 }, (_, i) => i);
    native!.reduceN(2, last, [new Float64Array(5000).fill(2), new Float64Array(5000).fill(1), last]); // even the last
    expect(Array.from(last.subarray(0, 4))).toEqual([2, 2, 2, 3]);
    expect(last[4999]).toBe(4999);
    expect(() => native!.reduceN(0, new Float32Array(3), [new Float64Array(3)])).toThrow(/kind or length/);
  });

  it("maps a region twice and both views see the same bytes", () => {
    const r = native!.hostRegionCreate(8192);
    const again = native!.hostRegionOpen(r.pid, r.fd, 8192);
    new Int32Array(r.buffer)[100] = 12345;
    expect(new Int32Array(again)[100]).toBe(12345);
    expect(() => native!.hostRegionOpen(r.pid, 987_654, 8192)).toThrow(/EREGION|hostRegionOpen/);
  });

  it("a progress counter: waits time out below the target, return once it is reached", () => {
    const a = native!.hostRegionCreate(4096).buffer;
    const b = native!.hostRegionCreate(4096).buffer;
    const t0 = performance.now();
    expect(native!.hostWait([a, b], 64, 1, 30)).toBe(false);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(25);
    native!.hostPost(a, 64, 1);
    expect(native!.hostWait([a, b], 64, 1, 10)).toBe(false);
    native!.hostPost(b, 64, 2);
    expect(native!.hostWait([a, b], 64, 1, 10)).toBe(true);
    native!.hostPost(a, 64, 2 ** 32 - 1); // wraps: 0 is after 2^32 - 1
    native!.hostPost(b, 64, 0);
    expect(native!.hostWait([a, b], 64, 2 ** 32 - 1, 10)).toBe(true);
    expect(() => native!.hostPost(a, 4094, 1)).toThrow(/byteOffset/);
  });
});

/** Runs `fn(args)` on every rank at once (the master here); results by rank. */
function onEveryRank<T>(cluster: Cluster, fn: (...a: never[]) => Promise<T>, args: unknown[] = []): Promise<T[]> {
  return Promise.all([
    (fn as (...a: unknown[]) => Promise<T>)(...args),
    ...cluster.workers.map((w) => rpc.rpcSync<T>(w.name, fn, args, { timeoutMs: 120_000 })),
  ]);
}

/**
 * Every op and dtype at `sizes`, with each algorithm (TPRPC_ALLREDUCE_ALGO host, then pipes), on
 * contiguous and strided tensors; integer-valued inputs, so every order of reduction gives the same
 * bits. Returns the mismatches ("op dtype size algo layout") found on this rank.
 */
async function compareAlgorithms(sizes: number[], ranks: number[] | null): Promise<string[]> {
  const d = tprpc.distributed;
  const group = ranks ? d.newGroup(ranks) : undefined;
  const members = ranks ?? Array.from({ length: d.getWorldSize() }, (_, r) => r);
  const me = d.getRank();
  if (!members.includes(me)) return [];
  const bad: string[] = [];
  const dtypes = ["float32", "float64", "int32", "int64", "uint8", "bool"] as const;
  for (const size of sizes)
    for (const dtype of dtypes)
      for (const op of Object.values(d.ReduceOp)) {
        if (dtype === "bool" ? op !== "max" && op !== "min" : op === "avg" && !dtype.startsWith("float")) continue;
        const input = (r: number) => {
          const v = Array.from({ length: size }, (_, i) =>
            op === "product" ? ((i + r) % 3) + 1 : (i * 7 + r * 3) % 5,
          );
          return tprpc.tensor(dtype === "bool" ? v.map((x) => x % 2 === 1) : v, { dtype });
        };
        let want = input(members[0]!);
        for (const r of members.slice(1)) {
          const x = input(r);
          want =
            op === "product"
              ? want.mul(x)
              : op === "max"
                ? tprpc.maximum(want, x)
                : op === "min"
                  ? tprpc.minimum(want, x)
                  : want.add(x);
        }
        if (op === "avg") want = want.div(members.length);
        if (dtype === "uint8" || dtype === "bool") want = want.to(dtype);
        for (const algo of ["host", "pipes"]) {
          process.env.TPRPC_ALLREDUCE_ALGO = algo;
          const flat = input(me);
          await d.allReduce(flat, { op, group });
          // strided: every other column of a [size, 2] tensor, its neighbours untouched
          const base = tprpc.full([size, 2], 9, { dtype: dtype === "bool" ? "uint8" : dtype }).to(dtype);
          const view = base.select(1, 1);
          view.copy_(input(me));
          await d.allReduce(view, { op, group });
          const same = (a: sdk.Tensor) =>
            a.numel() === 0 ? a.shape[0] === size : a.to("float64").sub(want.to("float64")).abs().max().item() === 0;
          const tag = `${op} ${dtype} ${size} ${algo}`;
          if (!same(flat)) bad.push(`${tag} contiguous`);
          if (!same(view)) bad.push(`${tag} strided`);
          const border = base.select(1, 0).to("float64");
          const off =
            size === 0
              ? 0
              : border
                  .sub(dtype === "bool" ? 1 : 9)
                  .abs()
                  .max()
                  .item();
          if (off !== 0) bad.push(`${tag} border`);
        }
      }
  delete process.env.TPRPC_ALLREDUCE_ALGO;
  return bad;
}

/** A group whose member `odd` asks for another chunk size: the set-up fails, every member uses the pipes. */
async function mismatchedSetUp(odd: number): Promise<number[]> {
  const d = tprpc.distributed;
  process.env.TPRPC_ALLREDUCE_ALGO = "host";
  if (d.getRank() === odd) process.env.TPRPC_HOST_CHUNK_BYTES = "131072";
  const g = d.newGroup([0, 1, 2, 3]);
  const out: number[] = [];
  for (let k = 0; k < 2; k++) {
    const t = tprpc.full([100_003], d.getRank() + 1);
    await d.allReduce(t, { group: g });
    out.push(t.min().item(), t.max().item());
  }
  process.env.TPRPC_HOST_CHUNK_BYTES = "65536";
  delete process.env.TPRPC_ALLREDUCE_ALGO;
  return out;
}

/** This process's shared-memory regions (the memfds the host algorithm maps). */
const regionsOf = (pid: number) =>
  fs
    .readFileSync(`/proc/${pid}/maps`, "utf8")
    .split("\n")
    .filter((l) => l.includes("tprpc-collective")).length;

describe.skipIf(!native)("allReduce through shared memory, 4 processes", () => {
  let cluster: Cluster | undefined;
  const saved = process.env.TPRPC_HOST_CHUNK_BYTES;
  beforeAll(async () => {
    process.env.TPRPC_HOST_CHUNK_BYTES = "65536";
    cluster = await startGroup({
      processes: true,
      workers: 3,
      env: { TPRPC_HOST_CHUNK_BYTES: "65536" },
      init: { rpcTimeoutMs: 60_000 },
    });
  }, 60_000);
  afterAll(async () => {
    if (saved === undefined) delete process.env.TPRPC_HOST_CHUNK_BYTES;
    else process.env.TPRPC_HOST_CHUNK_BYTES = saved;
    await stopGroup(cluster, false);
  }, 30_000);

  it("equals the pipes' algorithms and a plain reduction: every op and dtype, odd sizes, several chunks, strided", async () => {
    // 0, 1 and 3 elements: fewer than the members; 40_003 float32: 3 chunks of 64 KiB, ring on the pipes
    const bad = await within(onEveryRank(cluster!, compareAlgorithms, [[0, 1, 3, 40_003], null]), 120_000, "compare");
    expect(bad).toEqual([[], [], [], []]);
    const pids = [process.pid, ...cluster!.workers.map((w) => w.process.pid!)];
    for (const pid of pids) expect(regionsOf(pid)).toBeGreaterThanOrEqual(4); // its own and its 3 peers'
  }, 150_000);

  it("a subgroup of 3 (rank 0 not in it) equals too", async () => {
    const bad = await within(onEveryRank(cluster!, compareAlgorithms, [[40_003], [1, 2, 3]]), 90_000, "subgroup");
    expect(bad).toEqual([[], [], [], []]);
  }, 120_000);

  it("a set-up that fails on one member leaves the whole group on the pipes, with correct results", async () => {
    const got = await within(onEveryRank(cluster!, mismatchedSetUp, [2]), 60_000, "mismatched set-up");
    for (const r of got) expect(r).toEqual([10, 10, 10, 10]);
  }, 90_000);

  it("a member that never joins fails the others with RpcTimeoutError after timeoutMs", async () => {
    const join = async (timeoutMs: number) => {
      process.env.TPRPC_ALLREDUCE_ALGO = "host";
      const t = tprpc.ones([300_000]);
      return tprpc.distributed.allReduce(t, { timeoutMs }).then(
        () => "completed",
        (e: Error) => e.constructor.name,
      );
    };
    await within(onEveryRank(cluster!, join, [60_000]), 60_000, "a first allReduce");
    // ranks 0..2 only: a new group of all four, so the world group's chunk count stays in step
    const partial = async () => {
      const d = tprpc.distributed;
      process.env.TPRPC_ALLREDUCE_ALGO = "host";
      const g = d.newGroup([0, 1, 2, 3]);
      await d.allReduce(tprpc.ones([300_000]), { group: g }); // set-up, with everyone
      if (d.getRank() === 3) return "absent";
      const t0 = performance.now();
      const r = await d.allReduce(tprpc.ones([300_000]), { group: g, timeoutMs: 1_000 }).then(
        () => "completed",
        (e: Error) => e.constructor.name,
      );
      return `${r} ${performance.now() - t0 < 5_000}`;
    };
    expect(await within(onEveryRank(cluster!, partial), 30_000, "a partial allReduce")).toEqual([
      "RpcTimeoutError true",
      "RpcTimeoutError true",
      "RpcTimeoutError true",
      "absent",
    ]);
  }, 90_000);

  it("a peer killed mid-collective fails the others with WorkerUnavailableError", async () => {
    const pending = async () => {
      const d = tprpc.distributed;
      process.env.TPRPC_ALLREDUCE_ALGO = "host";
      const t = tprpc.ones([2_000_000]);
      return d.allReduce(t, { timeoutMs: 60_000 }).then(
        () => "completed",
        (e: Error) => e.constructor.name,
      );
    };
    // everyone once (the set-up is done), then ranks 0..2 again while rank 3 is killed
    await within(onEveryRank(cluster!, pending), 60_000, "a first allReduce");
    const runs = [
      pending(),
      ...["worker1", "worker2"].map((w) => rpc.rpcSync<string>(w, pending, [], { timeoutMs: 60_000 })),
    ];
    await new Promise((r) => setTimeout(r, 300));
    cluster!.workers.find((w) => w.name === "worker3")!.process.kill("SIGKILL");
    const t0 = performance.now();
    expect(await within(Promise.all(runs), 20_000, "allReduce with a dead peer")).toEqual([
      "WorkerUnavailableError",
      "WorkerUnavailableError",
      "WorkerUnavailableError",
    ]);
    expect(performance.now() - t0).toBeLessThan(10_000);
  }, 90_000);
});
