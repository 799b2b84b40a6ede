/**
 * Old-generation headroom for processes that receive tensors, arranged by the library so that a
 * master started with plain `node master.js` runs as the flagged benchmarks do (issue 23, item 7).
 *
 * Why: a plain Node process has a small heap (~10 MB live, old-generation limit ~26 MB). While it
 * receives 4 MB tensors V8 grows the young generation to its 16 MB maximum, and once the
 * old generation's slack (limit − size) is no larger than the young generation's capacity V8 starts
 * incremental marking ("Start (allocation limit)" in --trace-incremental-marking): measured here, 13–16
 * mark-compacts per 200 round trips of 4 MB, with marking steps and black allocation in between
 * (received buffers allocated while marking live until the next mark-compact). The workers tprpc
 * starts get `--initial-old-space-size=256` (rpc.RPC_NODE_FLAGS), which makes the limit large; a
 * user's master cannot get a heap flag at run time (v8.setFlagsFromString is read at heap set-up).
 *
 * What: V8 sets the next limit from the live old-generation size after each mark-compact, so a
 * block of live old-generation memory raises it the same way. `ensureHeapHeadroom()` (called by the
 * pipe layer when a pipe opens) keeps one array of TPRPC_HEAP_HEADROOM_MB (default 64) MiB of
 * doubles alive for the process's life: doubles hold no pointers, so the marker does not scan them;
 * the cost is that much resident memory. Measured (plain master, shm, 200 round trips of 4 MB,
 * one run each on the loaded 2-core box, so only the GC counts are firm): 0 MiB 13 mark-compacts,
 * 32 MiB 0, 64 MiB 0 (p90 1.5 ms against 4.9 ms). Skipped where node was started with
 * --initial-old-space-size or --min-old-space-size (argv or NODE_OPTIONS): the user sized the heap.
 *
 * Growing percent (issue 23, shm under load). V8 counts the external memory allocated since the last
 * mark-compact (every received ArrayBuffer, landed blocks included) against the old generation's
 * slack, and after frequent collections its dynamic growing factor drops to its minimum (1.1), so
 * the slack the headroom leaves is about 24 MB. At 40 MB per message, marking then started again
 * right after each mark-compact ("Start (allocation limit)", slack 23-24 MB): 37-42 mark-compacts per
 * 40 round trips in the master (a larger landing budget changed nothing: 35 vs 37), 16-21 ms of master
 * CPU per round trip. `ensureHeapGrowing()` (from ensureHeapHeadroom) therefore sets V8's
 * --heap-growing-percent to TPRPC_HEAP_GROWING_PERCENT (default 100: the next limit is twice the live
 * size; 0 leaves V8's policy), which V8 reads each time it sets a limit. A process-wide memory trade:
 * V8 applies it after choosing its growing mode, so it also overrides the smaller factors (1.1-1.3) V8
 * uses under memory pressure or near the heap limit. Measured (plain master, shm, 40 round trips each,
 * quiet, two runs): 40 MB 37-39 -> 12-13 mark-compacts, master CPU 16-19 -> 8-8.5 ms per round trip,
 * round trip 16.0 -> 11.3 ms; 4 MB 12 -> 0 mark-compacts per 300, master CPU 1.6 -> 0.8 ms per round
 * trip. Skipped where node's argv or
 * NODE_OPTIONS sets --heap-growing-percent.
 *
 * Scavenges on the main thread (issue 23, shm under load). A process that receives tensors runs a
 * scavenge every few large messages (V8 collects the young generation once the young ArrayBuffers'
 * bytes pass its limit: every ~4 round trips of 4 MB). V8 runs it on the main thread and its helper
 * threads together and waits for the last helper; with the cores full (2 busy processes beside a
 * master and a worker on 2 cores) a helper waits for a core while the main thread waits for it.
 * `ensureGcSerial()` (from ensureHeapHeadroom) therefore sets --no-parallel-scavenge and
 * --no-concurrent-array-buffer-sweeping (the sweep that frees dead buffers, landed blocks included,
 * then runs in the pause instead of on a helper), unless TPRPC_GC_SERIAL=0. V8 reads both at each
 * collection. Not the other flags of --single-threaded-gc: V8 checks concurrent and parallel marking
 * against state made at heap set-up, and turning them off at run time aborted the process in a trial
 * ("Check failed: heap()->concurrent_marking()->IsStopped()"). Measured (bench/p2p_timeline.ts, rpcSync
 * 4 MB, 300 round trips a run, both processes set alike, 2026-11-26): under 2 busy processes, 10
 * interleaved pairs, median 1.29 ms (1.05-1.73) against 1.58 ms (1.34-2.67), faster in 8 of 10; quiet,
 * 5 runs each, median 1.00 ms against 1.25 ms; `bench:channels --load 2`, 3 interleaved pairs, 4 MB 1.60,
 * 1.07, 2.30 ms against 2.64, 2.77, 1.69 ms. The pipelined GPT (bench --e2e --gpt-only, 8 interleaved
 * pairs): median 113.3 ms a step either way, faster in 4 of 8. All on this 2-core machine: the flags are
 * process-wide, and a process with many idle cores and a large young generation may scavenge slower
 * without helpers (TPRPC_GC_SERIAL=0 keeps V8's default). Skipped where node's command line names
 * --single-threaded-gc, --[no-]parallel-scavenge or --[no-]concurrent-array-buffer-sweeping: the user
 * chose (node refuses them in NODE_OPTIONS; it is read anyway, as for the heap flags above).
 */
import v8 from "node:v8";
import { debug } from "../util/index.js";

const DEFAULT_MB = 64;
const DEFAULT_GROWING_PERCENT = 100;
/** What ensureGcSerial sets (see the file comment). */
export const GC_SERIAL_FLAGS = ["--no-parallel-scavenge", "--no-concurrent-array-buffer-sweeping"] as const;
let ballast: number[] | null = null;
let growing: number | undefined;
/** node flags that say the user chose how V8 collects: gcSerial() then leaves it alone. */
const USER_GC_FLAGS = new Set([
  "--single-threaded-gc",
  "--parallel-scavenge",
  "--no-parallel-scavenge",
  "--concurrent-array-buffer-sweeping",
  "--no-concurrent-array-buffer-sweeping",
]);
let serial: boolean | undefined;

/** node's flags from argv and NODE_OPTIONS, names only, `_` read as `-`. */
function nodeFlags(env: NodeJS.ProcessEnv, execArgv: readonly string[]): string[] {
  return [...execArgv, ...(env.NODE_OPTIONS ?? "").split(/\s+/)].map((a) => a.split("=")[0]!.replace(/_/g, "-"));
}

/** The headroom in MiB this process should keep: TPRPC_HEAP_HEADROOM_MB, or 0 when node's heap flags size it. */
export function heapHeadroomMb(
  env: NodeJS.ProcessEnv = process.env,
  execArgv: readonly string[] = process.execArgv,
): number {
  const flags = nodeFlags(env, execArgv);
  if (flags.some((f) => f === "--initial-old-space-size" || f === "--min-old-space-size")) return 0;
  const v = env.TPRPC_HEAP_HEADROOM_MB;
  if (v === undefined || v === "") return DEFAULT_MB;
  const n = Number(v);
  return Number.isInteger(n) && n >= 0 && n <= 4096 ? n : DEFAULT_MB;
}

/**
 * V8's old-generation growing percent this process sets: TPRPC_HEAP_GROWING_PERCENT (0-400; 0 leaves
 * V8's own), default 100; 0 where node's argv or NODE_OPTIONS sets --heap-growing-percent.
 */
export function heapGrowingPercent(
  env: NodeJS.ProcessEnv = process.env,
  execArgv: readonly string[] = process.execArgv,
): number {
  if (nodeFlags(env, execArgv).includes("--heap-growing-percent")) return 0;
  const v = env.TPRPC_HEAP_GROWING_PERCENT;
  if (v === undefined || v === "") return DEFAULT_GROWING_PERCENT;
  const n = Number(v);
  return Number.isInteger(n) && n >= 0 && n <= 400 ? n : DEFAULT_GROWING_PERCENT;
}

/** Sets V8's growing percent once per process (see the file comment). Returns it (0: V8's own policy). */
export function ensureHeapGrowing(): number {
  if (growing !== undefined) return growing;
  growing = heapGrowingPercent();
  if (growing > 0) {
    // NB: V8 reads this flag each time it sets the next limit, so setting it at run time takes effect
    v8.setFlagsFromString(`--heap-growing-percent=${growing}`);
    debug(1, "heap", `old generation grows by ${growing}% of its live size (TPRPC_HEAP_GROWING_PERCENT)`);
  }
  return growing;
}

/**
 * Whether this process should run its scavenges and array-buffer sweeping on the main thread:
 * TPRPC_GC_SERIAL (`0` no, anything else yes; default yes); no where node's argv or NODE_OPTIONS
 * names one of those flags or --single-threaded-gc.
 */
export function gcSerial(
  env: NodeJS.ProcessEnv = process.env,
  execArgv: readonly string[] = process.execArgv,
): boolean {
  if (nodeFlags(env, execArgv).some((f) => USER_GC_FLAGS.has(f))) return false;
  return env.TPRPC_GC_SERIAL !== "0";
}

/** Hands each of GC_SERIAL_FLAGS to `setFlag` when `on`; returns `on`. */
export function applyGcSerial(on: boolean, setFlag: (flag: string) => void): boolean {
  if (on) for (const f of GC_SERIAL_FLAGS) setFlag(f);
  return on;
}

/** Sets GC_SERIAL_FLAGS in V8 once per process when gcSerial() says so; returns whether it did. */
export function ensureGcSerial(): boolean {
  if (serial !== undefined) return serial;
  serial = applyGcSerial(gcSerial(), (f) => v8.setFlagsFromString(f));
  if (serial) debug(1, "heap", "scavenges and array-buffer sweeping on the main thread (TPRPC_GC_SERIAL)");
  return serial;
}

/** Allocates the headroom once per process (see the file comment); later calls do nothing. Returns its MiB. */
export function ensureHeapHeadroom(): number {
  ensureHeapGrowing();
  ensureGcSerial();
  if (ballast !== null) return (ballast.length * 8) / (1 << 20);
  const mb = heapHeadroomMb();
  // NB: fill with a double, so the elements are a FixedDoubleArray (no pointers for the marker)
  ballast = mb > 0 ? new Array<number>(mb * 131072).fill(0.5) : [];
  if (mb > 0) debug(1, "heap", `keeping ${mb} MiB of old-generation headroom (TPRPC_HEAP_HEADROOM_MB)`);
  return mb;
}
