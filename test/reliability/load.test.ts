/**
 * Load: 64 concurrent callers on the master, each making a run of calls spread
 * over 3 real worker processes, half with an empty float32 tensor and half with
 * a 64 KB one of seeded content. The callee returns the call's id, an FNV-1a
 * checksum of the bytes it received and the tensor reversed; the caller checks
 * all three against what it sent, and each worker keeps the ids it ran. Proves
 * no call is lost (every one resolves), none is duplicated (no id answered or
 * run twice, each worker ran exactly the calls sent to it) and none is wrong
 * (id, checksum and the reversed tensor match, so no reply reached another
 * call and no byte was corrupted either way).
 * CI: 64 × 150 calls; TPRPC_RELIABILITY_FULL=1: 64 × 10,000.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Tensor, rpc, tensor } from "../../sdk/index.js";
import { type Cluster, startGroup, stopGroup, within } from "../conformance/group.js";
import { FULL, below, fnv1a, prng, report, seededFloats, size } from "./common.js";

declare const tprpc: typeof import("../../sdk/index.js");

const CALLERS = 64;
const CALLS = size(150, 10_000);
const NUMEL = 16_384; // 64 KB of float32
const SEED = 0x10ad5eed;
const WORKERS = ["worker1", "worker2", "worker3"] as const;

/** Runs on the callee: records the id, and returns it with the checksum of the bytes received and the tensor reversed. */
const check = (id: number, x: Tensor): [number, number, Tensor] => {
  const g = globalThis as unknown as { __relSeen?: Set<number>; __relDups?: number };
  const seen = (g.__relSeen ??= new Set<number>());
  if (seen.has(id)) g.__relDups = (g.__relDups ?? 0) + 1;
  else seen.add(id);
  const a = x.typedArray() as Float32Array;
  const b = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  let h = 0x811c9dc5;
  for (let i = 0; i < b.length; i++) h = Math.imul(h ^ b[i]!, 0x01000193) >>> 0;
  const n = a.length;
  const r = new Float32Array(n);
  for (let i = 0; i < n; i++) r[i] = a[n - 1 - i]!;
  return [id, h, tprpc.tensor(r)];
};

describe(`load: ${CALLERS} callers × ${CALLS} calls over 3 workers${FULL ? " (full)" : ""}`, () => {
  let cluster: Cluster | undefined;
  beforeAll(async () => {
    cluster = await startGroup({ processes: true });
  }, 60_000);
  afterAll(() => stopGroup(cluster), 30_000);

  it(
    "loses, duplicates and corrupts no call",
    async () => {
      const sentTo = new Map<string, number>(WORKERS.map((w) => [w, 0]));
      const answered = new Map<number, number>();
      const problems = { lost: 0, duplicated: 0, wrongId: 0, wrongChecksum: 0, wrongTensor: 0 };
      const firstErrors: string[] = [];
      let bytes = 0;

      const caller = async (c: number): Promise<void> => {
        const rand = prng(SEED + c);
        for (let k = 0; k < CALLS; k++) {
          const id = c * CALLS + k;
          const big = (rand() & 1) === 1;
          const to = WORKERS[below(rand, WORKERS.length)]!;
          const data = big ? seededFloats(NUMEL, SEED ^ Math.imul(id + 1, 0x9e3779b1)) : new Float32Array(0);
          const sum = fnv1a(data);
          sentTo.set(to, sentTo.get(to)! + 1);
          let reply: [number, number, Tensor];
          try {
            reply = await rpc.rpcSync<[number, number, Tensor]>(to, check, [id, tensor(data)], { timeoutMs: 60_000 });
          } catch (e) {
            problems.lost++;
            if (firstErrors.length < 5)
              firstErrors.push(`call ${id} to ${to}: ${(e as Error).name}: ${(e as Error).message}`);
            continue;
          }
          const [rid, rsum, y] = reply;
          bytes += 2 * data.byteLength;
          const seen = answered.get(rid) ?? 0;
          answered.set(rid, seen + 1);
          if (seen > 0) problems.duplicated++;
          if (rid !== id) {
            problems.wrongId++;
            if (firstErrors.length < 5) firstErrors.push(`call ${id} to ${to} was answered with id ${rid}`);
            continue;
          }
          if (rsum !== sum) problems.wrongChecksum++;
          const r = y.typedArray() as Float32Array;
          let same = y.dtype === "float32" && r.length === data.length;
          for (let i = 0; same && i < r.length; i++) same = r[i] === data[data.length - 1 - i];
          if (!same) problems.wrongTensor++;
        }
      };

      const t0 = performance.now();
      await within(
        Promise.all(Array.from({ length: CALLERS }, (_, c) => caller(c))),
        size(120_000, 1_700_000),
        "the callers",
      );
      const s = (performance.now() - t0) / 1000;
      const total = CALLERS * CALLS;

      const onWorkers = await Promise.all(
        WORKERS.map((w) =>
          rpc.rpcSync<[number, number]>(w, () => {
            const g = globalThis as unknown as { __relSeen?: Set<number>; __relDups?: number };
            return [g.__relSeen?.size ?? 0, g.__relDups ?? 0];
          }),
        ),
      );
      report(
        "load",
        `${total} calls in ${s.toFixed(2)} s: ${(total / s).toFixed(0)} calls/s, ` +
          `${(bytes / s / 2 ** 20).toFixed(1)} MiB/s of tensor bytes (both ways); ` +
          `per worker sent/ran/run twice: ${WORKERS.map((w, i) => `${w} ${sentTo.get(w)}/${onWorkers[i]![0]}/${onWorkers[i]![1]}`).join(", ")}; ` +
          `problems ${JSON.stringify(problems)}`,
      );
      for (const e of firstErrors) report("load", `  ${e}`);

      expect(problems).toEqual({ lost: 0, duplicated: 0, wrongId: 0, wrongChecksum: 0, wrongTensor: 0 });
      expect(answered.size).toBe(total);
      expect(onWorkers.map(([ran]) => ran)).toEqual(WORKERS.map((w) => sentTo.get(w)));
      expect(onWorkers.map(([, twice]) => twice)).toEqual([0, 0, 0]);
    },
    size(180_000, 1_800_000),
  );
});
