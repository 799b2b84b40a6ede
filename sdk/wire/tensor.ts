/**
 * Tensors on the wire: a small descriptor in the payload, the bytes out of band.
 *
 * Encoding (extension 0x10), one tensor:
 * 1. Pick the bytes to send. A contiguous tensor sends exactly its view's bytes, a
 *    zero-copy window on its storage (so a small slice of a big storage costs only the
 *    slice). A non-contiguous view is compacted first (raw.contiguous: one copy of
 *    numel × itemSize bytes).
 * 2. Tensors of one message that view the same bytes of one storage (same storage,
 *    offset and numel, e.g. `x` and `x.view(2, 2)`) share one buffer, and arrive
 *    sharing one Storage.
 * 3. The descriptor is `[dtype, shape, bufferIndex, device, requiresGrad]`; strides are
 *    always the contiguous strides of `shape`, so they are not sent.
 * Decoding validates every field (hostile input) and rebuilds the tensor over the
 * received bytes without a copy when they are aligned for the dtype, else copies them
 * into an aligned array.
 */
import { DeviceError, ProtocolError } from "../errors/index.js";
import { type DType, DTYPES, type StorageArray, allocArray, isFloating, itemSize } from "../tensor/dtype.js";
import { contiguous } from "../tensor/raw.js";
import { contiguousStrides } from "../tensor/shape.js";
import { Storage } from "../tensor/storage.js";
import { Tensor } from "../tensor/tensor.js";
import { WIRE_EXT, type WireDecodeContext, type WireEncodeContext, defineWireType } from "./registry.js";

/** Most dims a received tensor may have. */
export const MAX_TENSOR_DIMS = 64;

/** The descriptor as it travels in the payload. */
export type TensorDescriptor = [dtype: DType, shape: number[], buffer: number, device: string, requiresGrad: boolean];

const sentBuffers = new WeakMap<WireEncodeContext, Map<Storage, Map<string, number>>>();
const receivedStorages = new WeakMap<WireDecodeContext, Map<string, Storage>>();

function bytesOf(data: StorageArray, offsetElems: number, byteLength: number): Uint8Array {
  return new Uint8Array(data.buffer, data.byteOffset + offsetElems * data.BYTES_PER_ELEMENT, byteLength);
}

export function encodeTensor(t: Tensor, ctx: WireEncodeContext): TensorDescriptor {
  const numel = t.numel();
  const byteLength = numel * itemSize(t.dtype);
  let index: number;
  if (t.isContiguous()) {
    let byStorage = sentBuffers.get(ctx);
    if (!byStorage) sentBuffers.set(ctx, (byStorage = new Map()));
    let views = byStorage.get(t.storage);
    if (!views) byStorage.set(t.storage, (views = new Map()));
    const key = `${t.offset}:${numel}`;
    const seen = views.get(key);
    if (seen !== undefined) index = seen;
    else {
      index = ctx.addBuffer(bytesOf(t.storage.data, t.offset, byteLength), t.device);
      views.set(key, index);
    }
  } else {
    const c = contiguous(t);
    index = ctx.addBuffer(bytesOf(c.storage.data, c.offset, byteLength), t.device);
  }
  ctx.tensors.push(t);
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

export function decodeTensor(data: unknown, ctx: WireDecodeContext): Tensor {
  if (!Array.isArray(data) || data.length !== 5) throw bad("expected [dtype, shape, buffer, device, requiresGrad]");
  const [dtype, shape, index, device, requiresGrad] = data as unknown[];
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
  if (numel * itemSize(dt) !== bytes.byteLength)
    throw bad(
      `shape ${JSON.stringify(shape)} of ${dt} needs ${numel * itemSize(dt)} bytes but buffer ${index} has ${bytes.byteLength}`,
    );
  if (typeof device !== "string") throw bad("device must be a string");
  if (typeof requiresGrad !== "boolean") throw bad("requiresGrad must be a boolean");
  if (requiresGrad && !isFloating(dt)) throw bad(`a ${dt} tensor cannot require grad`);
  let dev;
  try {
    dev = ctx.mapDevice(device);
  } catch (e) {
    if (e instanceof DeviceError) throw bad(e.message);
    throw e;
  }
  let storages = receivedStorages.get(ctx);
  if (!storages) receivedStorages.set(ctx, (storages = new Map()));
  const key = `${index}:${dt}:${dev.toString()}`;
  let storage = storages.get(key);
  if (!storage) storages.set(key, (storage = new Storage(arrayFromBytes(dt, bytes), dt, dev)));
  const t = new Tensor(storage, shape as number[], contiguousStrides(shape as number[]), 0);
  if (requiresGrad) t.requiresGrad_(true);
  ctx.tensors.push(t);
  return t;
}

defineWireType(WIRE_EXT.TENSOR, { Class: Tensor, encode: encodeTensor, decode: decodeTensor });
