/**
 * V8's gc() on request, with or without --expose-gc: the global one when the
 * flag was given, else one taken once from a fresh context with the flag set
 * briefly (works on Node 20 and later; the flag is turned off again, so user
 * code sees no global gc). Used by the RRef holders (sdk/rpc/gc.ts) and by the
 * CUDA backend, whose device memory comes back only after V8 collected the
 * storages that own it (sdk/tensor/backend/cuda/index.ts).
 */
import v8 from "node:v8";
import vm from "node:vm";

/**
 * V8's gc(): with no argument a full, synchronous collection; `{ type: "minor" }` a scavenge of the young
 * generation. NB: V8 reads only type "minor" and execution "async" from the object; any other object
 * (`{ type: "major" }` included) counts as the legacy truthy argument, which means minor.
 */
export type GcFunction = (options?: { type?: "major" | "minor"; execution?: "sync" | "async" }) => unknown;

let gcFn: GcFunction | null | undefined;

/** V8's gc(), or null when it cannot be had here. */
export function v8Gc(): GcFunction | null {
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
  return gcFn;
}
