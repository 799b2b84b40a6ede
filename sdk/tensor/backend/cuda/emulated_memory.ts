/**
 * The memory side of the emulated CUDA device (`TPRPC_CUDA=emulate`): the
 * CudaMemoryApi that CudaDeviceBackend needs, over the emulated device's plain
 * host allocations (the addon's `cudaKernels("emulate")` namespace: memAlloc,
 * memFree, memInfo and synchronous copies).
 *
 * What the emulated device is for: running the op dispatch code and the
 * kernels' indexing (compiled for the host) on the same path as a GPU, so the
 * parity suites check them in CI. It has no streams (every launch and copy
 * completes before it returns), so streams here are names only, and no
 * caching allocator: each storage is one host allocation, freed when the
 * storage is collected (the addon's block tracker frees it, as a real device's
 * tracker hands it back to the caching allocator). The caching allocator itself is checked against a
 * stand-in driver instead (test/native/cuda_allocator.test.ts).
 */
import type { CudaMemoryApi, CudaSegment } from "./index.js";

/** The emulated device's own memory calls (native/src/cuda/binding.cc). */
export interface EmulatedDeviceMemory {
  memAlloc(device: number, bytes: number): bigint;
  /** Frees the block; returns its size. */
  memFree(device: number, ptr: bigint): number;
  memInfo(device: number): { free: number; total: number };
  copyHtoD(device: number, ptr: bigint, offset: number, src: Uint8Array): void;
  copyDtoH(device: number, ptr: bigint, offset: number, dst: Uint8Array): void;
  copyDtoD(
    srcDevice: number,
    src: bigint,
    srcOffset: number,
    dstDevice: number,
    dst: bigint,
    dstOffset: number,
    bytes: number,
  ): void;
  // The block tracker (native/src/gpu/block_tracker.h) over this device's memFree.
  trackBlock(owner: object, device: number, ptr: bigint, bytes: number): void;
  sweepBlocks(): { bytes: number; blocks: number; failed: number };
  trackedBlocks(): { bytes: number; blocks: number; sweeps: number; freedBlocks: number };
}

/** A CudaMemoryApi over the emulated device: synchronous, uncached, with torch's stat keys kept. */
export function emulatedMemoryApi(dev: EmulatedDeviceMemory): CudaMemoryApi {
  const pinned = new WeakSet<ArrayBuffer>();
  const stats = { current: 0, peak: 0, allocations: 0, frees: 0 };
  const host = { allocated: 0, peakAllocated: 0, hostAllocs: 0, hostFrees: 0 };
  const hostFreer = new FinalizationRegistry<number>((bytes) => {
    host.allocated -= bytes;
    host.hostFrees++;
  });
  let nextStream = 1n;
  return {
    memInfo: (device) => dev.memInfo(device),
    copyDtoD: (srcDevice, src, srcOffset, dstDevice, dst, dstOffset, bytes) =>
      dev.copyDtoD(srcDevice, src, srcOffset, dstDevice, dst, dstOffset, bytes),
    cachingAlloc(device, bytes) {
      const ptr = dev.memAlloc(device, bytes);
      stats.current += bytes;
      stats.allocations++;
      stats.peak = Math.max(stats.peak, stats.current);
      return ptr;
    },
    cachingFree(device, ptr) {
      stats.current -= dev.memFree(device, ptr);
      stats.frees++;
    },
    trackBlock: (owner, device, ptr, bytes) => dev.trackBlock(owner, device, ptr, bytes),
    sweepBlocks() {
      const r = dev.sweepBlocks();
      stats.current -= r.bytes;
      stats.frees += r.blocks;
      return r;
    },
    trackedBlocks: () => dev.trackedBlocks(),
    recordStream: () => undefined,
    emptyCache: () => undefined,
    memoryStats: () => ({
      "allocated_bytes.all.current": stats.current,
      "allocated_bytes.all.peak": stats.peak,
      "reserved_bytes.all.current": stats.current,
      "reserved_bytes.all.peak": stats.peak,
      "allocation.all.allocated": stats.allocations,
      "allocation.all.freed": stats.frees,
      num_alloc_retries: 0,
      num_ooms: 0,
    }),
    resetPeakMemoryStats() {
      stats.peak = stats.current;
    },
    resetAccumulatedMemoryStats() {
      stats.allocations = 0;
      stats.frees = 0;
    },
    memorySnapshot: (): CudaSegment[] => [],
    streamCreate: () => nextStream++,
    streamDestroy: () => undefined,
    streamSynchronize: () => undefined,
    streamQuery: () => true,
    streamWaitStream: () => undefined,
    deviceSynchronize: () => undefined,
    hostAlloc(bytes) {
      const b = new ArrayBuffer(bytes);
      pinned.add(b);
      host.allocated += bytes;
      host.peakAllocated = Math.max(host.peakAllocated, host.allocated);
      host.hostAllocs++;
      hostFreer.register(b, bytes);
      return b;
    },
    isPinned: (view) => view.buffer instanceof ArrayBuffer && pinned.has(view.buffer),
    hostMemoryStats: () => ({ ...host, reserved: host.allocated }),
    copyHtoDAsync: (device, dst, dstOffset, src) => dev.copyHtoD(device, dst, dstOffset, src),
    copyDtoHAsync: (device, src, srcOffset, dst) => dev.copyDtoH(device, src, srcOffset, dst),
    memsetAsync: (device, ptr, offset, value, bytes) =>
      dev.copyHtoD(device, ptr, offset, new Uint8Array(bytes).fill(value)),
    copyDtoDAsync: (device, src, srcOffset, dst, dstOffset, bytes) =>
      dev.copyDtoD(device, src, srcOffset, device, dst, dstOffset, bytes),
  };
}
