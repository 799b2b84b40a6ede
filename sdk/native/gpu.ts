/**
 * Typed wrapper of the addon's GPU namespace (native/src/gpu): whether the
 * CUDA driver, NVRTC, cuBLAS and NCCL can be used here (each loaded with
 * dlopen at run time from dynlib's table, so one binary runs with and without
 * them), the CUDA devices this process sees, and NCCL unique ids.
 *
 * Every query is safe on a machine without GPUs: a library that is missing,
 * too old, or finds no device is "not viable" with a reason saying what to
 * install or set; the addon itself missing is a reason too.
 *
 * @example
 *   const cuda = gpuLibrary("cuda");
 *   if (!cuda.isViable()) console.log(cuda.reason());   // "cuda is not installed ... LD_LIBRARY_PATH"
 *   for (const d of cudaDevices()) console.log(d.index, d.name, d.pciBusId);
 */
import { loadNative, nativeLoadError, toNativeError } from "./binding.js";

export type GpuLibName = "cuda" | "nvrtc" | "cublas" | "nccl";

/** What dlopen found for one GPU library (native/src/dynlib.h). */
export interface GpuLibStatus {
  viable: boolean;
  /** Why not viable; says what to install or set. */
  reason?: string;
  version?: string;
  path?: string;
  /** CUDA driver only: devices reported by cuDeviceGetCount. */
  devices?: number;
}

/** One CUDA device as the driver describes it (what channel negotiation compares across peers). */
export interface CudaDeviceInfo {
  index: number;
  name: string;
  /** "0000:3b:00.0": with the host identity, names the physical GPU. */
  pciBusId: string;
  /** Compute capability. */
  major: number;
  minor: number;
  multiProcessors: number;
  unifiedAddressing: boolean;
}

/**
 * The addon's caching allocator, streams, pinned memory and stream-ordered copies
 * (native/src/gpu/cuda_memory.cc); the CUDA DeviceBackend's `CudaMemoryApi` documents each call.
 * Streams and device pointers are bigints (0n: the legacy default stream). Failures are NativeError
 * "ECUDA" (a driver call), "EOOM" (out of memory after freeing the cache) or "EINVAL".
 */
export interface NativeCudaMemory {
  cachingAlloc(device: number, bytes: number, stream: bigint): bigint;
  cachingFree(device: number, ptr: bigint): void;
  /** Tracks `ptr`'s block as owned by `owner`, held weakly (native/src/gpu/block_tracker.h). */
  trackBlock(owner: object, device: number, ptr: bigint, bytes: number): void;
  /** Frees (cachingFree) the tracked blocks whose owners were garbage collected. */
  sweepBlocks(): { bytes: number; blocks: number; failed: number };
  /** The tracked blocks still owned, sweeps so far and blocks they freed. */
  trackedBlocks(): { bytes: number; blocks: number; sweeps: number; freedBlocks: number };
  recordStream(device: number, ptr: bigint, stream: bigint): void;
  emptyCache(device: number): void;
  memoryStats(device: number): Record<string, number>;
  resetPeakMemoryStats(device: number): void;
  resetAccumulatedMemoryStats(device: number): void;
  memorySnapshot(device: number): {
    address: bigint;
    size: number;
    stream: bigint;
    pool: "small" | "large";
    blocks: { size: number; requested: number; state: "active_allocated" | "inactive" | "active_pending_free" }[];
  }[];
  streamCreate(device: number): bigint;
  streamDestroy(device: number, stream: bigint): void;
  streamSynchronize(device: number, stream: bigint): void;
  streamQuery(device: number, stream: bigint): boolean;
  streamWaitStream(device: number, waiter: bigint, waitee: bigint): void;
  deviceSynchronize(device: number): void;
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
 * The cuda_ipc channel's driver calls (native/src/gpu/cuda_ipc.cc), one driver call each in the
 * device's primary context. Pointers, streams and events are bigints; IPC handles 64 bytes. A failed
 * call is NativeError "ECUDA" whose errno is the CUresult.
 */
export interface NativeCudaIpc {
  ipcAddressRange(device: number, ptr: bigint): { base: bigint; size: number };
  ipcGetMemHandle(device: number, base: bigint): Uint8Array;
  ipcOpenMemHandle(device: number, handle: Uint8Array, flags: number): bigint;
  ipcCloseMemHandle(device: number, base: bigint): void;
  eventCreate(device: number, flags: number): bigint;
  eventDestroy(device: number, event: bigint): void;
  eventRecord(device: number, event: bigint, stream: bigint): void;
  /** true once complete, false while CUDA_ERROR_NOT_READY. */
  eventQuery(device: number, event: bigint): boolean;
  /** Blocks the JS thread until the event completed. */
  eventSynchronize(device: number, event: bigint): void;
  /** cuEventSynchronize on a libuv pool thread: resolves once the event completed. */
  eventWait(device: number, event: bigint): Promise<void>;
  ipcGetEventHandle(device: number, event: bigint): Uint8Array;
  ipcOpenEventHandle(device: number, handle: Uint8Array): bigint;
  streamWaitEvent(device: number, stream: bigint, event: bigint): void;
}

/**
 * The nccl channel's calls (native/src/gpu/nccl.cc) over libnccl.so.2 loaded with dlopen. Without
 * it every call throws NativeError "ENOTVIABLE"; a failed call is "ENCCL" whose errno is the
 * ncclResult_t. NB: NCCL needs one GPU per rank.
 */
export interface NativeNccl {
  /** Runs off the JS thread (it blocks until every rank joined). */
  ncclCommInitRank(device: number, nranks: number, id: Uint8Array, rank: number): Promise<bigint>;
  ncclCommDestroy(comm: bigint): void;
  ncclCommAbort(comm: bigint): void;
  /** The communicator's asynchronous error (0: none). */
  ncclCommGetAsyncError(comm: bigint): number;
  ncclSend(device: number, comm: bigint, ptr: bigint, bytes: number, peer: number, stream: bigint): void;
  ncclRecv(device: number, comm: bigint, ptr: bigint, bytes: number, peer: number, stream: bigint): void;
  ncclGroupStart(): void;
  ncclGroupEnd(): void;
  ncclErrorString(result: number): string;
}

/** The addon's `gpu()` namespace. */
export interface NativeGpu extends NativeCudaMemory, NativeCudaIpc, NativeNccl {
  status(): Record<GpuLibName, GpuLibStatus>;
  /** Throws NativeError code "ENOTVIABLE" (with the reason) when the CUDA driver is not viable. */
  devices(): CudaDeviceInfo[];
  /** 128 bytes; throws NativeError "ENOTVIABLE" without NCCL, "ENCCL" when NCCL fails. */
  ncclUniqueId(): Uint8Array;

  // Device memory, synchronous, on the device's primary context (NativeError "ECUDA" on failure).
  // NB: exercised against a stand-in driver only so far; `npm run gpu:check` runs it on a GPU.
  /** A device pointer to `bytes` fresh bytes on `device`. */
  memAlloc(device: number, bytes: number): bigint;
  memFree(device: number, ptr: bigint): void;
  /** Free and total bytes of `device`, as torch.cuda.mem_get_info. */
  memInfo(device: number): { free: number; total: number };
  /** Host bytes `src` to [ptr + offset, ...). */
  copyHtoD(device: number, ptr: bigint, offset: number, src: Uint8Array): void;
  /** [ptr + offset, ...) to the host bytes `dst`. */
  copyDtoH(device: number, ptr: bigint, offset: number, dst: Uint8Array): void;
  /** Device to device, across devices too; returns once the bytes landed. */
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

/** A GPU library as its users (device backend, channel contexts) ask it. */
export interface GpuLibrary {
  readonly name: GpuLibName;
  isViable(): boolean;
  /** Why not viable (null when viable). */
  reason(): string | null;
  /** The library's version when viable ("12.4", "2.21.5"). */
  version(): string | null;
}

let cached: NativeGpu | null | undefined;

function wrapAll<T extends object>(o: T): T {
  const out: Record<string, unknown> = {};
  for (const [k, fn] of Object.entries(o))
    out[k] =
      typeof fn === "function"
        ? (...a: unknown[]) => {
            try {
              const r = (fn as (...x: unknown[]) => unknown)(...a);
              // NB: a native promise (ncclCommInitRank) rejects with the raw error; type it too
              return r instanceof Promise ? r.catch((e: unknown) => Promise.reject(toNativeError(e))) : r;
            } catch (e) {
              throw toNativeError(e);
            }
          }
        : fn;
  return out as T;
}

/** The addon's GPU namespace, or null when the addon did not load. */
export function nativeGpu(): NativeGpu | null {
  if (cached !== undefined) return cached;
  const native = loadNative();
  cached = native ? wrapAll(native.gpu() as NativeGpu) : null;
  return cached;
}

let statuses: Record<GpuLibName, GpuLibStatus> | null = null;

/** Each library's status (probed once per process). */
export function gpuStatus(): Record<GpuLibName, GpuLibStatus> {
  if (statuses) return statuses;
  const g = nativeGpu();
  if (g) return (statuses = g.status());
  const reason = `the native addon did not load (${nativeLoadError() ?? "unknown reason"}), so GPU libraries cannot be loaded: build it with npm run build:native`;
  const none = (): GpuLibStatus => ({ viable: false, reason });
  return (statuses = { cuda: none(), nvrtc: none(), cublas: none(), nccl: none() });
}

/** One library's viability, with its reason. */
export function gpuLibrary(name: GpuLibName): GpuLibrary {
  return {
    name,
    isViable: () => gpuStatus()[name].viable,
    reason: () => (gpuStatus()[name].viable ? null : (gpuStatus()[name].reason ?? `${name} is not viable`)),
    version: () => gpuStatus()[name].version ?? null,
  };
}

/** The CUDA devices this process sees; empty when the CUDA driver is not viable. */
export function cudaDevices(): CudaDeviceInfo[] {
  if (!gpuLibrary("cuda").isViable()) return [];
  return nativeGpu()!.devices();
}
