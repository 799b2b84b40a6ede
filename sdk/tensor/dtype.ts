/**
 * Data types: their storage arrays, sizes, PyTorch's type-promotion rules,
 * and conversions for the 16-bit float formats (stored as raw uint16 bits,
 * computed in float32).
 */
import { DTypeError } from "../errors/index.js";

export type DType = "float32" | "float64" | "float16" | "bfloat16" | "int32" | "int64" | "uint8" | "bool";

export const DTYPES: readonly DType[] = [
  "float32",
  "float64",
  "float16",
  "bfloat16",
  "int32",
  "int64",
  "uint8",
  "bool",
];

export type StorageArray = Float32Array | Float64Array | Int32Array | BigInt64Array | Uint8Array | Uint16Array;

/** Arrays whose elements read as plain numbers. */
export type NumArray = Float32Array | Float64Array | Int32Array | Uint8Array;

export function itemSize(d: DType): number {
  switch (d) {
    case "float64":
    case "int64":
      return 8;
    case "float32":
    case "int32":
      return 4;
    case "float16":
    case "bfloat16":
      return 2;
    case "uint8":
    case "bool":
      return 1;
  }
}

export function allocArray(d: DType, n: number): StorageArray {
  switch (d) {
    case "float32":
      return new Float32Array(n);
    case "float64":
      return new Float64Array(n);
    case "int32":
      return new Int32Array(n);
    case "int64":
      return new BigInt64Array(n);
    case "float16":
    case "bfloat16":
      return new Uint16Array(n);
    case "uint8":
    case "bool":
      return new Uint8Array(n);
  }
}

/**
 * Like allocArray, but the contents are undefined: for kernel outputs that are
 * overwritten whole. Large arrays come from Node's unzeroed allocator
 * (Buffer.allocUnsafeSlow), which skips the memset or the fresh-page faults that
 * zeroing costs (measured: a 4M-element native add 2.5 ms zeroed vs 1.3 ms here).
 */
export function allocArrayUninit(d: DType, n: number): StorageArray {
  const bytes = n * itemSize(d);
  if (bytes < 1 << 16 || typeof Buffer === "undefined") return allocArray(d, n);
  return alignedArrayOver(d, Buffer.allocUnsafeSlow(bytes + alignPad).buffer as ArrayBuffer, n);
}

/** A storage array of dtype `d` over an existing buffer (e.g. native pooled memory), from its first byte. */
export function arrayOver(d: DType, buffer: ArrayBuffer, numel: number): StorageArray {
  return arrayAt(d, buffer, 0, numel);
}

function arrayAt(d: DType, buffer: ArrayBuffer, byteOffset: number, numel: number): StorageArray {
  switch (d) {
    case "float32":
      return new Float32Array(buffer, byteOffset, numel);
    case "float64":
      return new Float64Array(buffer, byteOffset, numel);
    case "int32":
      return new Int32Array(buffer, byteOffset, numel);
    case "int64":
      return new BigInt64Array(buffer, byteOffset, numel);
    case "float16":
    case "bfloat16":
      return new Uint16Array(buffer, byteOffset, numel);
    case "uint8":
    case "bool":
      return new Uint8Array(buffer, byteOffset, numel);
  }
}

// ---- 64-byte aligned host buffers
//
// V8 takes large ArrayBuffers from malloc, so their bytes start 16 bytes into a cache line, and the
// native kernels' 64-byte vector loads and stores straddle two lines. Large storages are therefore
// made with LINE bytes of slack and viewed from their first line (alignedArrayOver); their buffer's
// byteLength is the size asked for plus hostAlignPad(). Measured: a GPT micro-batch 1.5-4 % faster,
// a FedAvg client step 1-4 % (docs/architecture.md, "Small-op speed"). Without the native addon (a
// browser) nothing is padded or moved.

const LINE = 64;
let alignPad = 0;
let addressOf: ((b: ArrayBuffer) => number) | null = null;

/** Installs how a buffer's address is read (the native addon's addressOf), turning alignment on; null turns it off. */
export function setBufferAddressProvider(f: ((b: ArrayBuffer) => number) | null): void {
  addressOf = f;
  alignPad = f === null ? 0 : LINE;
}

/** The slack a large host buffer is made with, so its elements can start on a 64-byte line (0 when off). */
export function hostAlignPad(): number {
  return alignPad;
}

/**
 * A storage array over a buffer made with hostAlignPad() bytes of slack (alignedBuffer, the output
 * pool), starting at the buffer's first 64-byte line.
 */
export function alignedArrayOver(d: DType, buffer: ArrayBuffer, numel: number): StorageArray {
  let off = 0;
  if (addressOf !== null && buffer.byteLength >= numel * itemSize(d) + LINE) {
    off = (LINE - (addressOf(buffer) % LINE)) % LINE;
    if (off % 8 !== 0) off = 0; // NB: malloc gives 16-byte aligned blocks; anything else keeps its start
  }
  return arrayAt(d, buffer, off, numel);
}

/** A zeroed buffer for `bytes` bytes plus hostAlignPad(), for alignedArrayOver. */
export function alignedBuffer(bytes: number): ArrayBuffer {
  return new ArrayBuffer(bytes + alignPad);
}

export function isFloating(d: DType): boolean {
  return d === "float32" || d === "float64" || d === "float16" || d === "bfloat16";
}

export function isIntegral(d: DType, includeBool = false): boolean {
  return d === "int32" || d === "int64" || d === "uint8" || (includeBool && d === "bool");
}

/** The dtype whose JS-side compute array holds this dtype's values exactly. */
export function computeDType(d: DType): "float32" | "float64" | "int32" | "uint8" {
  switch (d) {
    case "float64":
    case "int64":
      return "float64"; // NB: int64 values beyond 2^53 lose precision in the TS backend.
    case "float32":
    case "float16":
    case "bfloat16":
      return "float32";
    case "int32":
      return "int32";
    case "uint8":
    case "bool":
      return "uint8";
  }
}

const CATEGORY: Record<DType, number> = {
  bool: 0,
  uint8: 1,
  int32: 1,
  int64: 1,
  float16: 2,
  bfloat16: 2,
  float32: 2,
  float64: 2,
};
const RANK: Record<DType, number> = {
  bool: 0,
  uint8: 1,
  int32: 2,
  int64: 3,
  float16: 4,
  bfloat16: 4,
  float32: 5,
  float64: 6,
};

/** Promotes two dtypes as torch.promote_types does. */
export function promoteTypes(a: DType, b: DType): DType {
  if (a === b) return a;
  if ((a === "float16" && b === "bfloat16") || (a === "bfloat16" && b === "float16")) return "float32";
  return RANK[a] >= RANK[b] ? a : b;
}

export function category(d: DType): number {
  return CATEGORY[d];
}

/** The dtype of a JS scalar: bool, int64 for integers, the default float otherwise. */
export function scalarDType(v: number | boolean): DType {
  if (typeof v === "boolean") return "bool";
  return Number.isInteger(v) ? "int64" : defaultFloat;
}

let defaultFloat: DType = "float32";
export function getDefaultDType(): DType {
  return defaultFloat;
}
export function setDefaultDType(d: DType): void {
  if (d !== "float32" && d !== "float64")
    throw new DTypeError(`setDefaultDType(): only float32 and float64 are allowed, got ${d}`);
  defaultFloat = d;
}

/** torch.can_cast: may a value of `from` be written into `to` without changing category downward? */
export function canCast(from: DType, to: DType): boolean {
  return CATEGORY[from] <= CATEGORY[to];
}

export function checkDType(d: string): DType {
  if (!(DTYPES as readonly string[]).includes(d))
    throw new DTypeError(`unknown dtype "${d}"; expected one of ${DTYPES.join(", ")}`);
  return d as DType;
}

// ---- 16-bit float conversions -------------------------------------------------------------

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function f32ToBf16(x: number): number {
  f32[0] = x;
  const bits = u32[0]!;
  if ((bits & 0x7fffffff) > 0x7f800000) return 0x7fc0; // NaN
  // round to nearest even
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
}

export function bf16ToF32(h: number): number {
  u32[0] = h << 16;
  return f32[0]!;
}

export function f32ToF16(x: number): number {
  f32[0] = x;
  const bits = u32[0]!;
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  let mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    if (rem > mid || (rem === mid && half & 1)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && half & 1)) half++;
  e = 0;
  return sign | half;
}

export function f16ToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}
