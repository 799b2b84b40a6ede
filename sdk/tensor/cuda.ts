/**
 * `tprpc.cuda`: torch.cuda's queries (./device.ts: isAvailable, deviceCount,
 * memGetInfo) plus what the CUDA backend's caching allocator adds, named as in
 * torch.cuda: memory stats, emptyCache, streams and synchronize. Also the
 * Tensor methods that need the CUDA backend: pinMemory, isPinned, recordStream.
 *
 * @example
 *   const x = tprpc.randn([1024, 1024]).pinMemory();      // page-locked host memory
 *   const y = x.to("cuda:0", { nonBlocking: true });       // returns before the copy ran
 *   tprpc.cuda.memoryAllocated(0);                         // bytes held by tensors on cuda:0
 *   const s = new tprpc.cuda.Stream(0);
 *   tprpc.cuda.stream(s, () => y.mul(2));                  // work (and memory) on stream s
 *   y.recordStream(s);                                     // y's block waits for s before reuse
 *   tprpc.cuda.emptyCache();                               // unused cached segments back to the driver
 */
import { DeviceError } from "../errors/index.js";
import { deviceBackendFor } from "./backend/devices.js";
import { CudaDeviceBackend, type CudaSegment } from "./backend/cuda/index.js";
import { arrayOver, itemSize } from "./dtype.js";
import { Device, type DeviceLike, assertDeviceUsable, cuda as queries } from "./device.js";
import { Storage } from "./storage.js";
import { Tensor } from "./tensor.js";
import * as raw from "./raw.js";

function backend(what: string): CudaDeviceBackend {
  const b = deviceBackendFor("cuda");
  if (b === undefined) {
    assertDeviceUsable(new Device("cuda", 0)); // throws the DeviceError that says why
  }
  if (!(b instanceof CudaDeviceBackend))
    throw new DeviceError(`${what} needs tprpc's CUDA backend; the registered one is '${b?.name}'`);
  return b;
}

/** The backend's native API, after checking that `device` names a usable CUDA device. */
function apiOn(device: DeviceLike | undefined, what: string): CudaDeviceBackend["api"] {
  cudaIndex(device, what);
  return backend(what).api;
}
/**
 * apiOn, after a sweep (CudaDeviceBackend.sweep): the blocks of storages V8 already collected go back
 * first, so stats count them as freed and emptyCache can return them, as torch's would.
 */
function sweptApiOn(device: DeviceLike | undefined, what: string): CudaDeviceBackend["api"] {
  cudaIndex(device, what);
  const b = backend(what);
  b.sweep();
  return b.api;
}
const at = (device: DeviceLike | undefined): number => (device === undefined ? 0 : Device.parse(device).index);

function cudaIndex(device: DeviceLike | undefined, what: string): number {
  const d = device === undefined ? new Device("cuda", 0) : Device.parse(device);
  if (d.type !== "cuda") throw new DeviceError(`${what} expects a CUDA device, got '${d}'`);
  assertDeviceUsable(d);
  return d.index;
}

/** A CUDA stream, as torch.cuda.Stream: work queued on it runs in order, other streams' work concurrently. */
export class Stream {
  readonly device: Device;
  /** The CUstream (0n: the legacy default stream). */
  readonly handle: bigint;

  constructor(device?: DeviceLike, handle?: bigint) {
    const i = cudaIndex(device, "Stream");
    this.device = new Device("cuda", i);
    this.handle = handle ?? backend("Stream").api.streamCreate(i);
  }

  /** Waits until all work queued on this stream ran. */
  synchronize(): void {
    backend("synchronize").api.streamSynchronize(this.device.index, this.handle);
  }

  /** True when all work queued on this stream ran. */
  query(): boolean {
    return backend("query").api.streamQuery(this.device.index, this.handle);
  }

  /** Work queued on this stream from now on waits for the work queued on `other` so far. */
  waitStream(other: Stream): void {
    backend("waitStream").api.streamWaitStream(this.device.index, this.handle, other.handle);
  }

  /** Synchronizes and destroys the stream (the default stream is never destroyed). */
  destroy(): void {
    if (this.handle !== 0n) backend("destroy").api.streamDestroy(this.device.index, this.handle);
  }
}

const memory = {
  Stream,
  /** Bytes held by tensors on the device (default cuda:0), as torch.cuda.memory_allocated. */
  memoryAllocated(device?: DeviceLike): number {
    return memory.memoryStats(device)["allocated_bytes.all.current"]!;
  },
  /** Peak of memoryAllocated since the start or resetPeakMemoryStats. */
  maxMemoryAllocated(device?: DeviceLike): number {
    return memory.memoryStats(device)["allocated_bytes.all.peak"]!;
  },
  /** Bytes the caching allocator holds from the driver (in use or cached), as torch.cuda.memory_reserved. */
  memoryReserved(device?: DeviceLike): number {
    return memory.memoryStats(device)["reserved_bytes.all.current"]!;
  },
  maxMemoryReserved(device?: DeviceLike): number {
    return memory.memoryStats(device)["reserved_bytes.all.peak"]!;
  },
  /** torch.cuda.memory_stats(): flat keys such as "allocated_bytes.all.current", "num_alloc_retries". */
  memoryStats(device?: DeviceLike): Record<string, number> {
    return sweptApiOn(device, "memoryStats").memoryStats(at(device));
  },
  resetPeakMemoryStats(device?: DeviceLike): void {
    sweptApiOn(device, "resetPeakMemoryStats").resetPeakMemoryStats(at(device));
  },
  resetAccumulatedMemoryStats(device?: DeviceLike): void {
    apiOn(device, "resetAccumulatedMemoryStats").resetAccumulatedMemoryStats(at(device));
  },
  /** The allocator's segments and their blocks, as torch.cuda.memory_snapshot(). */
  memorySnapshot(device?: DeviceLike): CudaSegment[] {
    return apiOn(device, "memorySnapshot").memorySnapshot(at(device));
  },
  /** Returns cached memory nothing uses to the driver (and unused pinned host blocks), as torch.cuda.empty_cache. */
  emptyCache(device?: DeviceLike): void {
    sweptApiOn(device, "emptyCache").emptyCache(at(device));
  },
  /** Waits for all work on the device, as torch.cuda.synchronize. */
  synchronize(device?: DeviceLike): void {
    apiOn(device, "synchronize").deviceSynchronize(at(device));
  },
  /** The stream work on the device is queued on now (default: the legacy default stream). */
  currentStream(device?: DeviceLike): Stream {
    const i = cudaIndex(device, "currentStream");
    return new Stream(i, backend("currentStream").currentStream(i));
  },
  /** Makes `s` its device's current stream, as torch.cuda.set_stream. */
  setStream(s: Stream): void {
    backend("setStream").setCurrentStream(s.device.index, s.handle);
  },
  /** Runs f with `s` as its device's current stream, then restores the previous one (torch.cuda.stream(s)). */
  stream<T>(s: Stream, f: () => T): T {
    const b = backend("stream");
    const prev = b.currentStream(s.device.index);
    b.setCurrentStream(s.device.index, s.handle);
    try {
      return f();
    } finally {
      b.setCurrentStream(s.device.index, prev);
    }
  },
  /** Pinned host memory held by tensors and cached: { allocated, peakAllocated, reserved, ... }. */
  hostMemoryStats() {
    return backend("hostMemoryStats").api.hostMemoryStats();
  },
};

/** torch.cuda: availability (./device.ts) and the caching allocator's memory and stream API. */
export const cuda: typeof queries & typeof memory = Object.assign(queries, memory);

declare module "./tensor.js" {
  interface Tensor {
    /** A copy in page-locked (pinned) host memory, as torch's pin_memory(); needs a usable CUDA backend. */
    pinMemory(): Tensor;
    /** True when this CPU tensor's bytes are in pinned memory (false wherever CUDA is not usable). */
    isPinned(): boolean;
    /** Marks this CUDA tensor as used on `stream`: its memory is reused only after the stream's work so far. */
    recordStream(stream: Stream): void;
  }
}

function hostBytes(t: Tensor): Uint8Array {
  const a = t.storage.data;
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

Tensor.prototype.pinMemory = function (this: Tensor): Tensor {
  if (this.device.type !== "cpu") throw new DeviceError(`cannot pin '${this.device}' memory, only CPU memory`);
  if (this.isPinned()) return this;
  const src = this.isContiguous() ? this : raw.copyAs(this);
  const n = src.numel();
  const bytes = n * itemSize(src.dtype);
  const buf = backend("pinMemory").pinnedHost(bytes);
  const data = arrayOver(src.dtype, buf, n);
  const from = src.storage.data;
  new Uint8Array(buf, 0, bytes).set(
    new Uint8Array(from.buffer, from.byteOffset + src.offset * itemSize(src.dtype), bytes),
  );
  return new Tensor(new Storage(data, src.dtype), [...src.shape], [...src.strides], 0);
};

Tensor.prototype.isPinned = function (this: Tensor): boolean {
  if (this.device.type !== "cpu" || deviceBackendFor("cuda") === undefined) return false;
  const b = deviceBackendFor("cuda")!;
  return this.storage.data.byteLength > 0 && (b.isPinned?.(hostBytes(this)) ?? false);
};

Tensor.prototype.recordStream = function (this: Tensor, stream: Stream): void {
  if (!this.device.equals(stream.device))
    throw new DeviceError(`recordStream: the tensor is on '${this.device}', the stream on '${stream.device}'`);
  const mem = this.storage.memory;
  if (mem) backend("recordStream").recordStream(mem, stream.handle);
};
