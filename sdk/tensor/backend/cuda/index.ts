/**
 * The CUDA DeviceBackend: device memory and copies through the CUDA driver
 * API (the addon's gpu() namespace, handed in by sdk/index.ts; the tensor
 * layer never loads native code). Ops on CUDA tensors are the kernel
 * backend's (./kernels.ts); the emulated device (TPRPC_CUDA=emulate) gives
 * this class its memory through ./emulated_memory.ts instead of the driver.
 *
 * Memory: every storage's bytes come from the addon's caching allocator
 * (native/src/gpu/caching_allocator.h: per device and stream, as torch's),
 * allocated on the device's current stream and handed back to it when the
 * storage's DeviceMemory is garbage collected (a FinalizationRegistry); the
 * allocator keeps the block for reuse instead of calling cuMemFree.
 *
 * Copies are ordered on the device's current stream (0n, the legacy default
 * stream, unless `tprpc.cuda.setStream` chose another): host to device goes
 * directly from pinned memory, through two pinned staging buffers otherwise;
 * device to host waits for its bytes unless the destination is pinned and the
 * copy non-blocking. NB: exercised on a stand-in driver in CI; `npm run
 * gpu:check` runs it on a GPU.
 */
import { type Device } from "../../device.js";
import type { DeviceBackend, DeviceMemory } from "../interface.js";

/** One segment of the caching allocator, as torch.cuda.memory_snapshot() lists them. */
export interface CudaSegment {
  address: bigint;
  size: number;
  stream: bigint;
  pool: "small" | "large";
  blocks: { size: number; requested: number; state: "active_allocated" | "inactive" | "active_pending_free" }[];
}

/** The driver calls this backend needs (sdk/native/gpu.ts `NativeGpu` has them). */
export interface CudaMemoryApi {
  memInfo(device: number): { free: number; total: number };
  copyDtoD(
    srcDevice: number,
    src: bigint,
    srcOffset: number,
    dstDevice: number,
    dst: bigint,
    dstOffset: number,
    bytes: number,
  ): void;
  cachingAlloc(device: number, bytes: number, stream: bigint): bigint;
  cachingFree(device: number, ptr: bigint): void;
  recordStream(device: number, ptr: bigint, stream: bigint): void;
  emptyCache(device: number): void;
  /** torch.cuda.memory_stats()'s flat keys ("allocated_bytes.all.current", ...). */
  memoryStats(device: number): Record<string, number>;
  resetPeakMemoryStats(device: number): void;
  resetAccumulatedMemoryStats(device: number): void;
  memorySnapshot(device: number): CudaSegment[];
  streamCreate(device: number): bigint;
  streamDestroy(device: number, stream: bigint): void;
  streamSynchronize(device: number, stream: bigint): void;
  streamQuery(device: number, stream: bigint): boolean;
  streamWaitStream(device: number, waiter: bigint, waitee: bigint): void;
  deviceSynchronize(device: number): void;
  /** Pinned host memory, back to the pinned cache once the ArrayBuffer is collected. */
  hostAlloc(bytes: number): ArrayBuffer;
  isPinned(view: Uint8Array): boolean;
  hostMemoryStats(): {
    allocated: number;
    peakAllocated: number;
    reserved: number;
    hostAllocs: number;
    hostFrees: number;
  };
  copyHtoDAsync(
    device: number,
    dst: bigint,
    dstOffset: number,
    src: Uint8Array,
    stream: bigint,
    blocking: boolean,
  ): void;
  copyDtoHAsync(
    device: number,
    src: bigint,
    srcOffset: number,
    dst: Uint8Array,
    stream: bigint,
    blocking: boolean,
  ): void;
  /** Sets `bytes` bytes at ptr + offset to `value`, ordered on the stream. */
  memsetAsync(device: number, ptr: bigint, offset: number, value: number, bytes: number, stream: bigint): void;
  copyDtoDAsync(
    device: number,
    src: bigint,
    srcOffset: number,
    dst: bigint,
    dstOffset: number,
    bytes: number,
    stream: bigint,
    blocking: boolean,
  ): void;
}

/**
 * `api` with `check(device)` run after each call that waits for the device's work: a blocking copy
 * to the host, a stream or device synchronize. The kernel backend's deferred index errors surface
 * there (CudaKernelBackend.checkErrors), as a CUDA error surfaces at the next synchronization.
 */
export function checkingAfterSync(api: CudaMemoryApi, check: (device: number) => void): CudaMemoryApi {
  return {
    ...api,
    copyDtoHAsync(device, src, srcOffset, dst, stream, blocking) {
      api.copyDtoHAsync(device, src, srcOffset, dst, stream, blocking);
      if (blocking) check(device);
    },
    streamSynchronize(device, stream) {
      api.streamSynchronize(device, stream);
      check(device);
    },
    deviceSynchronize(device) {
      api.deviceSynchronize(device);
      check(device);
    },
  };
}

interface Allocation {
  device: number;
  ptr: bigint;
}

export class CudaDeviceBackend implements DeviceBackend {
  readonly type = "cuda" as const;
  readonly name = "cuda-driver";
  private readonly freer: FinalizationRegistry<Allocation>;
  /** The current stream per device index (absent: 0n, the legacy default stream). */
  private readonly streams = new Map<number, bigint>();

  constructor(
    readonly api: CudaMemoryApi,
    private readonly count: number,
  ) {
    this.freer = new FinalizationRegistry((a) => {
      try {
        api.cachingFree(a.device, a.ptr);
      } catch {
        // NB: a failing free (driver shutting down) must not throw from a GC callback
      }
    });
  }

  deviceCount(): number {
    return this.count;
  }

  /** The stream work for `device` is queued on now. */
  currentStream(device: number): bigint {
    return this.streams.get(device) ?? 0n;
  }

  setCurrentStream(device: number, stream: bigint): void {
    if (stream === 0n) this.streams.delete(device);
    else this.streams.set(device, stream);
  }

  alloc(device: Device, byteLength: number, zero: boolean): DeviceMemory {
    const d = device.index;
    const ptr = byteLength > 0 ? this.api.cachingAlloc(d, byteLength, this.currentStream(d)) : 0n;
    const mem: DeviceMemory = { device, byteLength, handle: ptr };
    if (byteLength > 0) {
      this.freer.register(mem, { device: d, ptr });
      if (zero) this.api.memsetAsync(d, ptr, 0, 0, byteLength, this.currentStream(d));
    }
    return mem;
  }

  memoryInfo(device: Device): { free: number; total: number } {
    return this.api.memInfo(device.index);
  }

  copyFromHost(src: Uint8Array, dst: DeviceMemory, dstOffset: number, nonBlocking = false): void {
    const d = dst.device.index;
    this.api.copyHtoDAsync(d, dst.handle as bigint, dstOffset, src, this.currentStream(d), !nonBlocking);
  }

  copyToHost(src: DeviceMemory, srcOffset: number, dst: Uint8Array, nonBlocking = false): void {
    const d = src.device.index;
    this.api.copyDtoHAsync(d, src.handle as bigint, srcOffset, dst, this.currentStream(d), !nonBlocking);
  }

  copyDevice(src: DeviceMemory, srcOffset: number, dst: DeviceMemory, dstOffset: number, byteLength: number): void {
    const [s, d] = [src.device.index, dst.device.index];
    if (s === d) {
      // NB: stream-ordered, so whatever reads dst next on this stream sees the bytes
      this.api.copyDtoDAsync(
        d,
        src.handle as bigint,
        srcOffset,
        dst.handle as bigint,
        dstOffset,
        byteLength,
        this.currentStream(d),
        false,
      );
      return;
    }
    this.api.copyDtoD(s, src.handle as bigint, srcOffset, d, dst.handle as bigint, dstOffset, byteLength);
  }

  pinnedHost(byteLength: number): ArrayBuffer {
    return this.api.hostAlloc(byteLength);
  }

  isPinned(bytes: Uint8Array): boolean {
    return this.api.isPinned(bytes);
  }

  /** Marks `mem` as used on `stream` too: its block is reused only after that stream's work so far. */
  recordStream(mem: DeviceMemory, stream: bigint): void {
    if (mem.byteLength > 0) this.api.recordStream(mem.device.index, mem.handle as bigint, stream);
  }
}
