/**
 * Recycled CPU buffers for large kernel outputs. V8 frees an ArrayBuffer only at a garbage
 * collection, and every megabyte allocated counts towards the next major GC: a training step that
 * makes tens of MB of temporaries pays for them in GC pauses and in fresh, cold pages. The one
 * owner that knows when such a buffer is dead is the autograd engine: a gradient it made during a
 * backward pass and handed to exactly one node is garbage once that node has run
 * (sdk/autograd/engine.ts). It gives the storage back here (Storage.release), and the next
 * output of that byte size (Storage.allocUninit, via raw.output) takes it instead of a new one. The
 * SDK's modules' forward intermediates come back the same way once backward is done with them
 * (sdk/autograd/intermediates.ts).
 *
 * Only buffers this module sized itself are kept (POOL_MIN_BYTES and up), by exact byte length
 * (the size asked for plus hostAlignPad(): see alignedArrayOver in ./dtype.ts),
 * last in first out (the warmest in cache), at most the limit (setPoolLimit) in all; the rest are
 * left to GC.
 *
 * NB: it was off for a while: with it on, `npm run bench -- --e2e --quick`'s pipelined GPT hung more
 * often. The hang was not in the pool but in the RRef protocol (a call waiting for its RRef
 * argument's confirmation could be garbage collected, see sdk/rpc/rref_context.ts pendingUsers); the
 * pool only changed when V8 ran full collections.
 */
import { hostAlignPad } from "./dtype.js";

/** Outputs this large and larger come from, and go back to, the pool (smaller ones are cheap to GC). */
export const POOL_MIN_BYTES = 1 << 14;
/** The most bytes the pool keeps by default. */
export const POOL_MAX_BYTES = 64 << 20;
let limit = POOL_MAX_BYTES;

/** Sets the most bytes the pool keeps (0: recycle nothing); drops what is over it. Returns the previous limit. */
export function setPoolLimit(bytes: number): number {
  const prev = limit;
  limit = bytes;
  if (kept > limit) clearPool();
  return prev;
}

const free = new Map<number, ArrayBuffer[]>();
let kept = 0;
const counters = { reuses: 0, releases: 0, fresh: 0, freshBytes: 0 };

/**
 * A recycled buffer for `bytes` bytes (contents undefined), or null. Its byteLength is `bytes` plus
 * hostAlignPad(): view it with alignedArrayOver.
 */
export function takeBuffer(bytes: number): ArrayBuffer | null {
  const list = free.get(bytes + hostAlignPad());
  const b = list?.pop();
  if (b === undefined) return null;
  kept -= b.byteLength;
  counters.reuses++;
  return b;
}

/** Keeps `b` for reuse if there is room; the caller must hold no view of it any longer. */
export function giveBuffer(b: ArrayBuffer): void {
  const bytes = b.byteLength;
  if (bytes < POOL_MIN_BYTES || kept + bytes > limit) return;
  let list = free.get(bytes);
  if (!list) free.set(bytes, (list = []));
  list.push(b);
  kept += bytes;
  counters.releases++;
}

/** A buffer for a large output of `bytes` bytes: recycled, or new (not zeroed); view it with alignedArrayOver. */
export function outputBuffer(bytes: number): ArrayBuffer {
  const b = takeBuffer(bytes);
  if (b !== null) return b;
  counters.fresh++;
  counters.freshBytes += bytes;
  return Buffer.allocUnsafeSlow(bytes + hostAlignPad()).buffer as ArrayBuffer;
}

/** Bytes kept, buffers reused and released, and fresh buffers (and their bytes) made so far (benchmarks, tests). */
export function poolStats(): {
  keptBytes: number;
  reuses: number;
  releases: number;
  fresh: number;
  freshBytes: number;
} {
  return { keptBytes: kept, ...counters };
}

/** Drops every kept buffer (tests). */
export function clearPool(): void {
  free.clear();
  kept = 0;
}
