/**
 * The CUDA DeviceBackend: device memory and copies through the CUDA driver
 * API (the addon's gpu() namespace, handed in by sdk/index.ts; the tensor
 * layer never loads native code). Kernels on CUDA tensors are not part of it
 * yet, so ops on them give the Storage's DeviceError; .to/.cuda/.cpu work.
 *
 * Memory: one cuMemAlloc per storage, freed by cuMemFree when the storage's
 * DeviceMemory is garbage collected (a FinalizationRegistry). NB: a caching
 * allocator with streams, as torch's, is issue 9 part B, as is any run of
 * this file on a real GPU: its tests use a stand-in driver over host memory.
 */
import { type Device } from "../../device.js";
import type { DeviceBackend, DeviceMemory } from "../interface.js";

/** The driver calls this backend needs (sdk/native/gpu.ts `NativeGpu` has them). */
export interface CudaMemoryApi {
  memAlloc(device: number, bytes: number): bigint;
  memFree(device: number, ptr: bigint): void;
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
}

interface Allocation {
  device: number;
  ptr: bigint;
}

export class CudaDeviceBackend implements DeviceBackend {
  readonly type = "cuda" as const;
  readonly name = "cuda-driver";
  private readonly freer: FinalizationRegistry<Allocation>;

  constructor(
    private readonly api: CudaMemoryApi,
    private readonly count: number,
  ) {
    this.freer = new FinalizationRegistry((a) => {
      try {
        api.memFree(a.device, a.ptr);
      } catch {
        // NB: a failing free (driver shutting down) must not throw from a GC callback
      }
    });
  }

  deviceCount(): number {
    return this.count;
  }

  alloc(device: Device, byteLength: number, zero: boolean): DeviceMemory {
    const ptr = byteLength > 0 ? this.api.memAlloc(device.index, byteLength) : 0n;
    const mem: DeviceMemory = { device, byteLength, handle: ptr };
    if (byteLength > 0) {
      this.freer.register(mem, { device: device.index, ptr });
      // NB: the driver table has no memset yet; zeros come from the host (part B: cuMemsetD8).
      if (zero) this.api.copyHtoD(device.index, ptr, 0, new Uint8Array(byteLength));
    }
    return mem;
  }

  memoryInfo(device: Device): { free: number; total: number } {
    return this.api.memInfo(device.index);
  }

  copyFromHost(src: Uint8Array, dst: DeviceMemory, dstOffset: number): void {
    this.api.copyHtoD(dst.device.index, dst.handle as bigint, dstOffset, src);
  }

  copyToHost(src: DeviceMemory, srcOffset: number, dst: Uint8Array): void {
    this.api.copyDtoH(src.device.index, src.handle as bigint, srcOffset, dst);
  }

  copyDevice(src: DeviceMemory, srcOffset: number, dst: DeviceMemory, dstOffset: number, byteLength: number): void {
    this.api.copyDtoD(
      src.device.index,
      src.handle as bigint,
      srcOffset,
      dst.device.index,
      dst.handle as bigint,
      dstOffset,
      byteLength,
    );
  }
}
