/**
 * The CUDA driver calls the cuda_ipc protocol (./protocol.ts) makes, as one
 * small interface so the protocol can run against a stand-in in tests. Each
 * method is one driver call (named beside it); pointers, streams and events
 * are bigints, IPC handles are their 64 opaque bytes.
 *
 * The native binding is ./native_driver.ts (over native/src/gpu/cuda_ipc.cc,
 * through dynlib's dlopen table); a failed driver call there is a CudaIpcError.
 */
import { ChannelNotViableError } from "../../errors/index.js";

/** cuEventCreate flags: an event whose handle crosses processes must not record timing. */
export const CU_EVENT_DISABLE_TIMING = 0x2;
export const CU_EVENT_INTERPROCESS = 0x4;
/** cuIpcOpenMemHandle flag: enable peer access lazily when the handle's device differs. */
export const CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1;
/** Bytes in a CUipcMemHandle and a CUipcEventHandle. */
export const CU_IPC_HANDLE_SIZE = 64;

export interface CudaIpcDriver {
  /** cuMemGetAddressRange_v2: the allocation (caching-allocator segment) holding `ptr`. */
  addressRange(device: number, ptr: bigint): { base: bigint; size: number };
  /** cuIpcGetMemHandle on an allocation's base. */
  ipcGetMemHandle(device: number, base: bigint): Uint8Array;
  /** cuIpcOpenMemHandle_v2 in `device`'s context; the base of the mapped allocation. */
  ipcOpenMemHandle(device: number, handle: Uint8Array, flags: number): bigint;
  /** cuIpcCloseMemHandle. */
  ipcCloseMemHandle(device: number, base: bigint): void;
  /** cuEventCreate. */
  eventCreate(device: number, flags: number): bigint;
  /** cuIpcGetEventHandle (the event must be interprocess). */
  ipcGetEventHandle(device: number, event: bigint): Uint8Array;
  /** cuIpcOpenEventHandle. */
  ipcOpenEventHandle(device: number, handle: Uint8Array): bigint;
  /** cuEventRecord. */
  eventRecord(device: number, event: bigint, stream: bigint): void;
  /** cuEventQuery: true once complete, false while CUDA_ERROR_NOT_READY. */
  eventQuery(device: number, event: bigint): boolean;
  /**
   * cuEventSynchronize off the JS thread: resolves once the event completed. Optional: without it
   * the receiver polls eventQuery every pollMs (a millisecond timer, too coarse for 400 MB copies).
   */
  eventWait?(device: number, event: bigint): Promise<void>;
  /** cuEventDestroy_v2. */
  eventDestroy(device: number, event: bigint): void;
  /** cuStreamWaitEvent. */
  streamWaitEvent(device: number, stream: bigint, event: bigint): void;
  /** cuMemcpyDtoDAsync_v2. */
  copyDtoDAsync(device: number, dst: bigint, src: bigint, bytes: number, stream: bigint): void;
  /** The stream work for `device` is queued on now (torch's current stream): the sender's event is recorded there. */
  currentStream(device: number): bigint;
  /**
   * The receiver's copy stream for `device`; when it is not the current stream, it first waits on
   * the current stream (work already queued for the destination, such as its zero fill).
   */
  copyStream(device: number): bigint;
}

/** A CUDA driver call of the cuda_ipc channel failed; `result` is its CUresult. */
export class CudaIpcError extends ChannelNotViableError {
  constructor(
    readonly call: string,
    readonly result: number,
    detail: string,
  ) {
    super(`cuda_ipc: ${detail}`);
  }
}

/** The CUdeviceptr of a channel DeviceBuffer's memory (the tensor layer's DeviceMemory.handle). */
export function devicePointer(memory: unknown): bigint {
  const h = (memory as { handle?: unknown } | null)?.handle;
  if (typeof h !== "bigint") throw new TypeError("cuda_ipc: a DeviceBuffer's memory has no bigint handle");
  return h;
}
