/**
 * Element access shared by the tensor layer and the TypeScript backend: strided offset tables and
 * conversion between storages (including int64 as BigInt64Array and the
 * 16-bit floats kept as raw bits) and plain-number compute arrays.
 */
import { type NumArray, allocArray, bf16ToF32, computeDType, f16ToF32, f32ToBf16, f32ToF16 } from "./dtype.js";
import { isContiguous, numelOf } from "./shape.js";
import type { Storage } from "./storage.js";
import type { TensorView } from "./backend/interface.js";

/** Storage offsets of every element of a strided view, in row-major logical order. */
export function offsets(shape: readonly number[], strides: readonly number[], offset: number): Int32Array {
  const n = numelOf(shape);
  const out = new Int32Array(n);
  const rank = shape.length;
  if (n === 0) return out;
  if (rank === 0) {
    out[0] = offset;
    return out;
  }
  const inner = shape[rank - 1]!;
  const innerStride = strides[rank - 1]!;
  const idx = new Array<number>(rank).fill(0);
  let base = offset;
  for (let i = 0; i < n; i += inner) {
    for (let j = 0; j < inner; j++) out[i + j] = base + j * innerStride;
    // increment the outer counters (odometer)
    for (let d = rank - 2; d >= 0; d--) {
      idx[d]!++;
      base += strides[d]!;
      if (idx[d]! < shape[d]!) break;
      base -= idx[d]! * strides[d]!;
      idx[d] = 0;
    }
  }
  return out;
}

const NOOP = (): void => {};

/** Element `i` of `s` as a number (readerOf without making a reader). */
export function readAt(s: Storage, i: number): number {
  switch (s.dtype) {
    case "int64":
      return readInt64(s.data as BigInt64Array, i);
    case "float16":
      return readF16(s.data as Uint16Array, i);
    case "bfloat16":
      return readBf16(s.data as Uint16Array, i);
    default:
      return readPlain(s.data as NumArray, i);
  }
}

// NB: readers and writers are these functions bound to an array, not closures made per call: V8 holds a
// closure site's optimized code weakly, and closures dead at a full GC were compiled again and again
// (issue 23; docs/architecture.md, small-op speed)
function readInt64(a: BigInt64Array, i: number): number {
  return Number(a[i]!);
}
function readF16(a: Uint16Array, i: number): number {
  return f16ToF32(a[i]!);
}
function readBf16(a: Uint16Array, i: number): number {
  return bf16ToF32(a[i]!);
}
function readPlain(a: NumArray, i: number): number {
  return a[i]!;
}
function writeInt64(a: BigInt64Array, i: number, v: number): void {
  a[i] = Number.isFinite(v) ? BigInt(Math.trunc(v)) : v > 0 ? 0x7fffffffffffffffn : -0x8000000000000000n;
}
function writeF16(a: Uint16Array, i: number, v: number): void {
  a[i] = f32ToF16(v);
}
function writeBf16(a: Uint16Array, i: number, v: number): void {
  a[i] = f32ToBf16(v);
}
function writeBool(a: Uint8Array, i: number, v: number): void {
  a[i] = v !== 0 ? 1 : 0;
}
function writePlain(a: NumArray, i: number, v: number): void {
  a[i] = v;
}

export function readerOf(s: Storage): (i: number) => number {
  const d = s.data;
  switch (s.dtype) {
    case "int64":
      return readInt64.bind(null, d as BigInt64Array);
    case "float16":
      return readF16.bind(null, d as Uint16Array);
    case "bfloat16":
      return readBf16.bind(null, d as Uint16Array);
    default:
      return readPlain.bind(null, d as NumArray);
  }
}

export function writerOf(s: Storage): (i: number, v: number) => void {
  const d = s.data;
  switch (s.dtype) {
    case "int64":
      return writeInt64.bind(null, d as BigInt64Array);
    case "float16":
      return writeF16.bind(null, d as Uint16Array);
    case "bfloat16":
      return writeBf16.bind(null, d as Uint16Array);
    case "bool":
      return writeBool.bind(null, d as Uint8Array);
    default:
      return writePlain.bind(null, d as NumArray);
  }
}

/** True when the storage's own array holds plain numbers of the view's dtype. */
function direct(t: TensorView): boolean {
  const d = t.dtype;
  return d === "float32" || d === "float64" || d === "int32" || d === "uint8" || d === "bool";
}

/**
 * The view's elements in row-major order as a number array: a zero-copy
 * subarray for contiguous plain-number views, otherwise a converted copy.
 */
export function readContig(t: TensorView): NumArray {
  const n = numelOf(t.shape);
  if (direct(t) && isContiguous(t.shape, t.strides)) {
    return (t.storage.data as NumArray).subarray(t.offset, t.offset + n);
  }
  const out = allocArray(computeDType(t.dtype), n) as NumArray;
  const read = readerOf(t.storage);
  if (isContiguous(t.shape, t.strides)) {
    for (let i = 0; i < n; i++) out[i] = read(t.offset + i);
  } else {
    const offs = offsets(t.shape, t.strides, t.offset);
    for (let i = 0; i < n; i++) out[i] = read(offs[i]!);
  }
  return out;
}

/**
 * An array to compute a contiguous `out` into, and a commit function that
 * writes it back (a no-op when the array is out's own storage).
 */
export function outArray(out: TensorView): [NumArray, () => void] {
  const n = numelOf(out.shape);
  if (direct(out) && out.dtype !== "bool") {
    return [(out.storage.data as NumArray).subarray(out.offset, out.offset + n), NOOP];
  }
  if (out.dtype === "bool") {
    // NB: a Uint8Array would truncate 0.5 to 0; compute bools in float64 and normalise on commit.
    const f = new Float64Array(n);
    return [f, commitBool.bind(null, out, f)];
  }
  const tmp = allocArray(computeDType(out.dtype), n) as NumArray;
  return [tmp, commitWrite.bind(null, out, tmp)];
}

function commitBool(out: TensorView, f: Float64Array): void {
  const o = out.storage.data as Uint8Array;
  for (let i = 0; i < f.length; i++) o[out.offset + i] = f[i] !== 0 ? 1 : 0;
}

function commitWrite(out: TensorView, tmp: NumArray): void {
  const write = writerOf(out.storage);
  for (let i = 0; i < tmp.length; i++) write(out.offset + i, tmp[i]!);
}
