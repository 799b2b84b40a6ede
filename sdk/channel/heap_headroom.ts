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
 */
import { debug } from "../util/index.js";

const DEFAULT_MB = 64;
let ballast: number[] | null = null;

/** The headroom in MiB this process should keep: TPRPC_HEAP_HEADROOM_MB, or 0 when node's heap flags size it. */
export function heapHeadroomMb(
  env: NodeJS.ProcessEnv = process.env,
  execArgv: readonly string[] = process.execArgv,
): number {
  const flags = [...execArgv, ...(env.NODE_OPTIONS ?? "").split(/\s+/)].map((a) => a.split("=")[0]!.replace(/_/g, "-"));
  if (flags.some((f) => f === "--initial-old-space-size" || f === "--min-old-space-size")) return 0;
  const v = env.TPRPC_HEAP_HEADROOM_MB;
  if (v === undefined || v === "") return DEFAULT_MB;
  const n = Number(v);
  return Number.isInteger(n) && n >= 0 && n <= 4096 ? n : DEFAULT_MB;
}

/** Allocates the headroom once per process (see the file comment); later calls do nothing. Returns its MiB. */
export function ensureHeapHeadroom(): number {
  if (ballast !== null) return (ballast.length * 8) / (1 << 20);
  const mb = heapHeadroomMb();
  // NB: fill with a double, so the elements are a FixedDoubleArray (no pointers for the marker)
  ballast = mb > 0 ? new Array<number>(mb * 131072).fill(0.5) : [];
  if (mb > 0) debug(1, "heap", `keeping ${mb} MiB of old-generation headroom (TPRPC_HEAP_HEADROOM_MB)`);
  return mb;
}
