/**
 * What the RPC benchmarks share (`npm run bench`'s RPC section in ./rpc.ts and
 * `npm run bench:channels` in ./channels.ts): the sizes and in-flight count of
 * the reference scripts in ./reference, the timing method (warm-up, then
 * trials of a batch; the median per call, as reference/timing.py), the rpcSync/rpcAsync
 * identity measurements, and running + parsing the reference scripts
 * (reference/torch_rpc.py, reference/grpc_node.mjs) so ratios come from the same invocation.
 */
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { constants as perfConstants } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { Tensor, ones, rpc } from "../sdk/index.js";
import { v8Gc } from "../sdk/util/gc.js";
import { spawnInGroup } from "./spawn_group.js";

export const SIZES = [0, 4_000, 4_000_000, 40_000_000, 400_000_000];
export const ASYNC_SIZES = [0, 4_000];
export const IN_FLIGHT = 64;
export const ASYNC_CALLS = 4_000;

export interface Figures {
  /** bytes -> median seconds per round trip */
  sync: Map<number, number>;
  /** bytes -> median calls/s with IN_FLIGHT in flight */
  async: Map<number, number>;
}

/** (warm-up calls, trials, calls per trial) */
export type Plan = [number, number, number];

export const now = (): number => Number(process.hrtime.bigint()) / 1e9;

/** perf_hooks' GC kinds (constants.NODE_PERFORMANCE_GC_*), by the number a "gc" entry's detail.kind holds. */
export const GC_KINDS: Readonly<Record<number, string>> = {
  [perfConstants.NODE_PERFORMANCE_GC_MINOR]: "minor",
  [perfConstants.NODE_PERFORMANCE_GC_MAJOR]: "major",
  [perfConstants.NODE_PERFORMANCE_GC_INCREMENTAL]: "incremental marking",
  [perfConstants.NODE_PERFORMANCE_GC_WEAKCB]: "weak callbacks",
};

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/**
 * Median seconds per `call()`: warm-up, then `trials` timed batches. The caller has made (and
 * checked) the first call already, so the warm-up makes `warm - 1` more.
 */
export async function medianRoundTrip(call: () => Promise<unknown>, [warm, trials, batch]: Plan): Promise<number> {
  for (let i = 1; i < warm; i++) await call();
  const perCall: number[] = [];
  for (let t = 0; t < trials; t++) {
    const t0 = now();
    for (let i = 0; i < batch; i++) await call();
    perCall.push((now() - t0) / batch);
  }
  return median(perCall);
}

/** Calls/s with IN_FLIGHT calls outstanding at all times (ASYNC_CALLS per trial); median over trials. */
export async function callsPerSecond(call: () => Promise<unknown>, quick: boolean): Promise<number> {
  const run = async (): Promise<number> => {
    let issued = 0;
    const lane = async (): Promise<void> => {
      while (issued < ASYNC_CALLS) {
        issued++;
        await call();
      }
    };
    const t0 = now();
    await Promise.all(Array.from({ length: IN_FLIGHT }, lane));
    return ASYNC_CALLS / (now() - t0);
  };
  await run(); // warm-up
  const rates: number[] = [];
  for (let t = 0; t < (quick ? 3 : 5); t++) rates.push(await run());
  return median(rates);
}

/**
 * A full garbage collection between measurements, without --expose-gc (issue 23, item 7: the
 * benchmarks run with no node flags, as a user's `node master.js`): V8's gc() as sdk/util/gc.ts
 * takes it (the global one, else one from a fresh context with the flag set briefly), no argument.
 */
export function fullGc(): void {
  v8Gc()?.();
}

/** The shipped target of every RPC measurement. */
export const identity = (x: unknown): unknown => x;

/** A number for 0 B (as torch_rpc.py), else a float32 tensor of `nbytes`. */
export function payload(nbytes: number): number | Tensor {
  return nbytes === 0 ? 1 : ones([nbytes / 4], { dtype: "float32" });
}

/**
 * rpcSync identity round trips to `to`; throws if the value does not come back intact. `shared`:
 * the tensor is moved into shared memory first (Tensor.shareMemory_), as a zero-copy shm sender would.
 */
export async function rpcSyncRoundTrip(to: string, nbytes: number, plan: Plan, shared = false): Promise<number> {
  const x = payload(nbytes);
  if (shared && x instanceof Tensor) x.shareMemory_();
  const back = await rpc.rpcSync(to, identity, [x]);
  if (x instanceof Tensor) {
    const y = back as Tensor;
    if (!(y instanceof Tensor) || y.numel() !== x.numel() || y.dtype !== "float32")
      throw new Error(`identity returned ${String(y)} for a ${nbytes} B tensor`);
  } else if (back !== x) throw new Error(`identity returned ${String(back)} for ${String(x)}`);
  return medianRoundTrip(() => rpc.rpcSync(to, identity, [x]), plan);
}

/** JIT warm-up of both processes (V8 tiers up after a few thousand calls), before anything is timed. */
export async function warmUp(to: string, quick: boolean): Promise<void> {
  for (let i = 0; i < (quick ? 1_000 : 3_000); i++) await rpc.rpcSync(to, identity, [1]);
  const small = payload(4_000);
  for (let i = 0; i < (quick ? 1_000 : 3_000); i++) await rpc.rpcSync(to, identity, [small]);
  const mid = payload(4_000_000);
  for (let i = 0; i < 20; i++) await rpc.rpcSync(to, identity, [mid]);
  await Promise.all(Array.from({ length: IN_FLIGHT }, () => rpc.rpcAsync(to, identity, [1])));
}

/** rpcAsync identity to `to`, IN_FLIGHT outstanding; calls/s. */
export function rpcAsyncRate(to: string, nbytes: number, quick: boolean): Promise<number> {
  const x = payload(nbytes);
  return callsPerSecond(() => rpc.rpcAsync(to, identity, [x]), quick);
}

/** The repository root: the nearest directory above this file whose package.json is named "tprpc". */
export function repoRoot(): string | undefined {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = path.join(dir, "package.json");
    if (fs.existsSync(pkg) && (JSON.parse(fs.readFileSync(pkg, "utf8")) as { name?: string }).name === "tprpc")
      return dir;
    const up = path.dirname(dir);
    if (up === dir) return undefined;
    dir = up;
  }
}

function parseTime(v: string, unit: string): number {
  return Number(v) * (unit === "us" ? 1e-6 : unit === "ms" ? 1e-3 : 1);
}

/**
 * Runs bench/reference/torch_rpc.py (under TPRPC_TORCH_PYTHON, default /usr/bin/python3) or
 * bench/reference/grpc_node.mjs (with the devDependency @grpc/grpc-js, or one on NODE_PATH) from the repository
 * root, at SIZES (and ASYNC_SIZES with IN_FLIGHT for torch), and parses its result lines; `quick` passes the
 * scripts' --quick (fewer warm-up calls and trials). A string says why the reference is unavailable.
 */
export function runReference(
  kind: "torch" | "torch-tcp" | "grpc",
  quick = false,
  timeoutMs = 300_000,
): { figures: Figures; header: string } | string {
  const root = repoRoot();
  const file = kind === "grpc" ? "grpc_node.mjs" : "torch_rpc.py";
  const script = root && path.join(root, "bench", "reference", file);
  if (!script || !fs.existsSync(script)) return `bench/reference/${file} not found in the repository`;
  const quickArgs = quick ? ["--quick"] : [];
  let program: string;
  let r;
  if (kind !== "grpc") {
    program = process.env.TPRPC_TORCH_PYTHON ?? "/usr/bin/python3";
    // NB: "torch-tcp" pins TensorPipe to its uv (TCP) transport and basic channel: the same wire as ours.
    const tcpOnly = kind === "torch-tcp" ? ["--transports", "uv", "--channels", "basic"] : [];
    const sizes = ["--sizes", SIZES.join(","), "--async-sizes", ASYNC_SIZES.join(","), "--in-flight", `${IN_FLIGHT}`];
    r = spawnInGroup(program, [script, ...sizes, ...tcpOnly, ...quickArgs], timeoutMs);
  } else {
    try {
      createRequire(script).resolve("@grpc/grpc-js"); // as the script will: node_modules above it, or NODE_PATH
    } catch {
      return "@grpc/grpc-js is not installed (npm install: it is a devDependency)";
    }
    program = process.execPath;
    r = spawnInGroup(program, [script, "--sizes", SIZES.join(","), ...quickArgs], timeoutMs);
  }
  if (r.error) return `${program}: ${r.error.message}`;
  if (r.timedOut) return `${program} did not finish in ${timeoutMs / 1000} s (its process group was killed)`;
  if (r.status !== 0) return `${program} exited ${r.status}: ${(r.stderr ?? "").trim().slice(-300)}`;
  const figures: Figures = { sync: new Map(), async: new Map() };
  let header = "";
  for (const line of r.stdout.split("\n")) {
    if (line.startsWith("# ")) header = line.slice(2);
    const s = /^(?:rpc_sync identity|grpc-js unary echo)\s+([\d,]+) B\s+([\d.]+) (us|ms|s)\b/.exec(line);
    if (s) figures.sync.set(Number(s[1]!.replace(/,/g, "")), parseTime(s[2]!, s[3]!));
    const a = /^rpc_async identity, (\d+) in flight\s+([\d,]+) B\s+([\d.]+) calls\/s/.exec(line);
    if (a && Number(a[1]) === IN_FLIGHT) figures.async.set(Number(a[2]!.replace(/,/g, "")), Number(a[3]));
  }
  if (figures.sync.size === 0) return `no result lines in ${path.basename(script)}'s output: ${r.stdout.slice(0, 200)}`;
  return { figures, header };
}

export const fmtTime = (s: number): string =>
  s < 1e-3 ? `${(s * 1e6).toFixed(1)} us` : s < 1 ? `${(s * 1e3).toFixed(2)} ms` : `${s.toFixed(3)} s`;

/** A round-trip cell: the time, and GB/s (bytes both ways) from 4 MB up, with `digits` decimals. */
export function timeCell(s: number | undefined, nbytes: number, digits: number): string {
  if (s === undefined) return "-";
  return nbytes >= 4_000_000 ? `${fmtTime(s)} (${((2 * nbytes) / s / 1e9).toFixed(digits)} GB/s)` : fmtTime(s);
}
