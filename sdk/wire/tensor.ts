/**
 * Tensors on the wire: a small descriptor in the payload, the bytes out of band.
 *
 * Encoding (extension 0x10), one tensor:
 * 1. Pick the bytes to send. A contiguous tensor sends exactly its view's bytes, a
 *    zero-copy window on its storage (so a small slice of a big storage costs only the
 *    slice). A non-contiguous view keeps its strides, as PyTorch's do, when the window
 *    of storage it spans is at most STRIDED_SPAN_FACTOR times its own bytes (a column
 *    slice, a transpose, an expand): that window is sent as it is. A view spread thinly
 *    over a larger storage is compacted instead (raw.contiguous: one copy of
 *    numel × itemSize bytes), and arrives contiguous.
 * 2. Tensors of one message that view the same bytes of one storage (same storage,
 *    window, e.g. `x` and `x.view(2, 2)`) share one buffer, and arrive sharing one
 *    Storage.
 * 3. The descriptor is `[dtype, shape, bufferIndex, device, requiresGrad]` for a tensor
 *    laid out contiguously from the buffer's start, else the same plus
 *    `[strides, offset]` within the buffer.
 * 4. A tensor on a device (CUDA) sends a DeviceWindow on its storage's device memory
 *    instead of host bytes: the pipe's device channels move it, and nothing here reads it.
 * Decoding validates every field (hostile input) and rebuilds the tensor over the
 * received bytes without a copy when they are aligned for the dtype, else copies them
 * into an aligned array. A tensor lives where its buffer landed: on the CPU for host
 * bytes, on the window's device for device memory (the sender chose that target with
 * its device map, sdk/rpc/device_map_hook.ts); the descriptor's device is the sender's.
 */
import { DeviceError, ProtocolError } from "../errors/index.js";
import { type DType, DTYPES, type StorageArray, allocArray, isFloating, itemSize } from "../tensor/dtype.js";
import { contiguous } from "../tensor/raw.js";
import { type Device, cpu } from "../tensor/device.js";
import { contiguousStrides } from "../tensor/shape.js";
import { Storage } from "../tensor/storage.js";
import { Tensor } from "../tensor/tensor.js";
import {
  type DeviceWindow,
  WIRE_EXT,
  type WireBuffer,
  type WireDecodeContext,
  type WireEncodeContext,
  defineWireType,
  isDeviceWindow,
} from "./registry.js";

/** Most dims a received tensor may have. */
export const MAX_TENSOR_DIMS = 64;

/** The descriptor as it travels in the payload. */
export type TensorDescriptor =
  | [dtype: DType, shape: number[], buffer: number, device: string, requiresGrad: boolean]
  | [
      dtype: DType,
      shape: number[],
      buffer: number,
      device: string,
      requiresGrad: boolean,
      strides: number[],
      offset: number,
    ];

/** A strided view is sent as the window it spans when that is at most this many times its own bytes. */
export const STRIDED_SPAN_FACTOR = 4;

/** The storage elements a non-empty view with non-negative strides reaches: [first, last + 1). */
function spanOf(t: Tensor): [number, number] | null {
  let last = t.offset;
  for (let i = 0; i < t.shape.length; i++) {
    const st = t.strides[i]!;
    if (st < 0) return null;
    last += (t.shape[i]! - 1) * st;
  }
  return [t.offset, last + 1];
}

const sentBuffers = new WeakMap<WireEncodeContext, Map<Storage, Map<string, number>>>();
const receivedStorages = new WeakMap<WireDecodeContext, Map<string, Storage>>();

function bytesOf(data: StorageArray, offsetElems: number, byteLength: number): Uint8Array {
  return new Uint8Array(data.buffer, data.byteOffset + offsetElems * data.BYTES_PER_ELEMENT, byteLength);
}

/** `byteLength` bytes of `s` from element `offsetElems`: host bytes on the CPU, a device window elsewhere. */
function windowOf(s: Storage, offsetElems: number, byteLength: number): WireBuffer {
  if (s.memory === null) return bytesOf(s.data, offsetElems, byteLength);
  return { memory: s.memory, offset: offsetElems * itemSize(s.dtype), byteLength } satisfies DeviceWindow;
}

/** The buffer index of `elems` elements of t's storage from `start`: one buffer per window and message. */
function windowBuffer(t: Tensor, ctx: WireEncodeContext, start: number, elems: number): number {
  let byStorage = sentBuffers.get(ctx);
  if (!byStorage) sentBuffers.set(ctx, (byStorage = new Map()));
  let views = byStorage.get(t.storage);
  if (!views) byStorage.set(t.storage, (views = new Map()));
  const key = `${start}:${elems}`;
  let index = views.get(key);
  if (index === undefined) {
    index = ctx.addBuffer(windowOf(t.storage, start, elems * itemSize(t.dtype)), t.device);
    views.set(key, index);
  }
  return index;
}

export function encodeTensor(t: Tensor, ctx: WireEncodeContext): TensorDescriptor {
  const numel = t.numel();
  const byteLength = numel * itemSize(t.dtype);
  ctx.tensors.push(t);
  if (t.isContiguous() || numel === 0)
    return [t.dtype, [...t.shape], windowBuffer(t, ctx, t.offset, numel), t.device.toString(), t.requiresGrad];
  const span = spanOf(t);
  // NB: windows past 256 MiB are compacted: one copy costs less than sending up to 4x the bytes
  if (span && span[1] - span[0] <= STRIDED_SPAN_FACTOR * numel && (span[1] - span[0]) * itemSize(t.dtype) <= 2 ** 28) {
    const index = windowBuffer(t, ctx, span[0], span[1] - span[0]);
    return [t.dtype, [...t.shape], index, t.device.toString(), t.requiresGrad, [...t.strides], t.offset - span[0]];
  }
  const c = contiguous(t);
  const index = ctx.addBuffer(windowOf(c.storage, c.offset, byteLength), t.device);
  return [t.dtype, [...t.shape], index, t.device.toString(), t.requiresGrad];
}

function bad(msg: string): ProtocolError {
  return new ProtocolError(`bad tensor descriptor: ${msg}`);
}

/** A typed array of `dtype` over `bytes`: a view when aligned, else an aligned copy. */
export function arrayFromBytes(dtype: DType, bytes: Uint8Array): StorageArray {
  const size = itemSize(dtype);
  const n = bytes.byteLength / size;
  if (bytes.byteOffset % size === 0) {
    switch (dtype) {
      case "float32":
        return new Float32Array(bytes.buffer, bytes.byteOffset, n);
      case "float64":
        return new Float64Array(bytes.buffer, bytes.byteOffset, n);
      case "int32":
        return new Int32Array(bytes.buffer, bytes.byteOffset, n);
      case "int64":
        return new BigInt64Array(bytes.buffer, bytes.byteOffset, n);
      case "float16":
      case "bfloat16":
        return new Uint16Array(bytes.buffer, bytes.byteOffset, n);
      case "uint8":
      case "bool":
        return new Uint8Array(bytes.buffer, bytes.byteOffset, n);
    }
  }
  const out = allocArray(dtype, n);
  new Uint8Array(out.buffer, out.byteOffset, out.byteLength).set(bytes);
  return out;
}

/** A storage over a received buffer: host bytes (on the CPU) or a whole device allocation. */
function storageOver(bytes: WireBuffer, dt: DType, dev: Device): Storage {
  if (!isDeviceWindow(bytes)) {
    return new Storage(arrayFromBytes(dt, bytes), dt, dev);
  }
  if (bytes.offset !== 0) throw bad("a received device buffer must start its allocation");
  return Storage.onDevice(bytes.memory, dt, bytes.byteLength / itemSize(dt));
}

/**
 * What a tensor decodes as in a peek (WireDecodeContext.peek): the buffer index it names (unchecked)
 * and whether it is a strided view into that buffer (else it covers the buffer whole, in order).
 */
export interface TensorPeek {
  readonly peekedTensor: true;
  readonly index: unknown;
  readonly strided: boolean;
}

export function decodeTensor(data: unknown, ctx: WireDecodeContext): Tensor {
  if (!Array.isArray(data) || (data.length !== 5 && data.length !== 7))
    throw bad("expected [dtype, shape, buffer, device, requiresGrad] or that plus [strides, offset]");
  if (ctx.peek) return { peekedTensor: true, index: data[2], strided: data.length === 7 } as TensorPeek as never;
  const [dtype, shape, index, device, requiresGrad, stridesIn, offsetIn] = data as unknown[];
  if (typeof dtype !== "string" || !(DTYPES as readonly string[]).includes(dtype))
    throw bad(`unknown dtype ${JSON.stringify(dtype)}; expected one of ${DTYPES.join(", ")}`);
  const dt = dtype as DType;
  if (!Array.isArray(shape) || shape.length > MAX_TENSOR_DIMS)
    throw bad(`shape must be an array of at most ${MAX_TENSOR_DIMS} sizes`);
  let numel = 1;
  for (const s of shape as unknown[]) {
    if (typeof s !== "number" || !Number.isSafeInteger(s) || s < 0)
      throw bad(`shape ${JSON.stringify(shape)} has a size that is not a non-negative integer`);
    numel *= s;
    if (!Number.isSafeInteger(numel)) throw bad(`shape ${JSON.stringify(shape)} has too many elements`);
  }
  if (typeof index !== "number" || !Number.isInteger(index) || index < 0 || index >= ctx.buffers.length)
    throw bad(`buffer index ${String(index)} is out of range (the frame has ${ctx.buffers.length} buffers)`);
  const bytes = ctx.buffers[index]!;
  let strides = contiguousStrides(shape as number[]);
  let offset = 0;
  if (data.length === 7) {
    // NB: hostile input: every element the view reaches must lie inside the buffer
    if (
      !Array.isArray(stridesIn) ||
      stridesIn.length !== shape.length ||
      !stridesIn.every((st) => typeof st === "number" && Number.isSafeInteger(st) && st >= 0)
    )
      throw bad(`strides ${JSON.stringify(stridesIn)} must be ${shape.length} non-negative integers`);
    if (typeof offsetIn !== "number" || !Number.isSafeInteger(offsetIn) || offsetIn < 0)
      throw bad(`offset ${String(offsetIn)} must be a non-negative integer`);
    let last = offsetIn;
    for (let i = 0; i < shape.length; i++) last += ((shape[i] as number) - 1) * (stridesIn[i] as number);
    const elems = bytes.byteLength / itemSize(dt);
    if (numel === 0 || !Number.isInteger(elems) || last >= elems || !Number.isSafeInteger(last))
      throw bad(
        `a view of shape ${JSON.stringify(shape)} with strides ${JSON.stringify(stridesIn)} at ${offsetIn} does not fit buffer ${index} (${bytes.byteLength} bytes)`,
      );
    strides = stridesIn as number[];
    offset = offsetIn;
  } else if (numel * itemSize(dt) !== bytes.byteLength)
    throw bad(
      `shape ${JSON.stringify(shape)} of ${dt} needs ${numel * itemSize(dt)} bytes but buffer ${index} has ${bytes.byteLength}`,
    );
  if (typeof device !== "string") throw bad("device must be a string");
  if (typeof requiresGrad !== "boolean") throw bad("requiresGrad must be a boolean");
  if (requiresGrad && !isFloating(dt)) throw bad(`a ${dt} tensor cannot require grad`);
  let dev;
  try {
    // NB: the sender's device must parse, but the tensor lives where its buffer landed
    ctx.mapDevice(device);
    dev = isDeviceWindow(bytes) ? bytes.memory.device : cpu;
  } catch (e) {
    if (e instanceof DeviceError) throw bad(e.message);
    throw e;
  }
  let storages = receivedStorages.get(ctx);
  if (!storages) receivedStorages.set(ctx, (storages = new Map()));
  const key = `${index}:${dt}:${dev.toString()}`;
  let storage = storages.get(key);
  if (!storage) storages.set(key, (storage = storageOver(bytes, dt, dev)));
  const t = new Tensor(storage, shape as number[], strides, offset);
  if (requiresGrad) t.requiresGrad_(true);
  ctx.tensors.push(t);
  return t;
}

defineWireType(WIRE_EXT.TENSOR, { Class: Tensor, encode: encodeTensor, decode: decodeTensor });
