/**
 * Full garbage collections on request, for distributed reference counting.
 *
 * A user RRef tells its owner it is gone from a FinalizationRegistry callback,
 * and V8 runs those only after a mark-compact that found the RRef dead. A
 * process that makes many short-lived RRefs but allocates little itself (the
 * notebook driving a pipeline: `stage2.forward(stage1.remote().forward(x))`)
 * may go minutes without a mark-compact while each dropped RRef pins
 * megabytes of activations, and their autograd graph, on the owner. CPython's
 * reference counting frees those at once; here the owner notices its memory
 * growing and asks the RRefs' holders to collect (RREF_COLLECT), as Java RMI's
 * distributed GC runs periodic full collections on its clients.
 */
import v8 from "node:v8";
import vm from "node:vm";
import { debug } from "../util/index.js";

type GcFunction = (options?: { type?: "major" | "minor"; execution?: "sync" | "async" }) => unknown;

let gcFn: GcFunction | null | undefined;

/** V8's gc(): the global one under --expose-gc, else one taken from a fresh context with the flag set briefly. */
function gcFunction(): GcFunction | null {
  if (gcFn !== undefined) return gcFn;
  const global = (globalThis as { gc?: GcFunction }).gc;
  if (typeof global === "function") return (gcFn = global);
  try {
    // NB: the flag may already be on (e.g. --expose-gc with gc deleted from globalThis): then leave it on
    const wasOn = vm.runInNewContext("typeof gc") === "function";
    if (!wasOn) v8.setFlagsFromString("--expose-gc");
    try {
      const fn = vm.runInNewContext("gc") as unknown;
      gcFn = typeof fn === "function" ? (fn as GcFunction) : null;
    } finally {
      if (!wasOn) v8.setFlagsFromString("--no-expose-gc");
    }
  } catch {
    gcFn = null;
  }
  if (!gcFn) debug(1, "rref", "cannot run a garbage collection on request: V8's gc() is not available");
  return gcFn;
}

/** Requests closer together than this run one collection. */
const MIN_INTERVAL_MS = 250;
let lastCollection = -Infinity;
let collections = 0;

/**
 * Starts a full garbage collection (in a task of its own, not on the caller's stack), so
 * that the finalizers of unreachable RRefs run soon. False when one ran less
 * than 250 ms ago or gc() is unavailable.
 */
export function collectGarbage(): boolean {
  const now = performance.now();
  if (now - lastCollection < MIN_INTERVAL_MS) return false;
  const gc = gcFunction();
  if (!gc) return false;
  lastCollection = now;
  collections++;
  debug(2, "rref", "full garbage collection requested for RRef finalizers");
  void Promise.resolve(gc({ type: "major", execution: "async" })).catch(() => undefined);
  return true;
}

/** Whether collectGarbage can run a collection at all (V8's gc() could be had). */
export function canCollectGarbage(): boolean {
  return gcFunction() !== null;
}

/** How many collections collectGarbage has started in this process. */
export function requestedCollections(): number {
  return collections;
}
