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
import { debug } from "../util/index.js";
import { v8Gc } from "../util/gc.js";

let warned = false;

/** V8's gc() (sdk/util/gc.ts), or null with one debug line saying so. */
function gcFunction(): ReturnType<typeof v8Gc> {
  const fn = v8Gc();
  if (!fn && !warned) {
    warned = true;
    debug(1, "rref", "cannot run a garbage collection on request: V8's gc() is not available");
  }
  return fn;
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
