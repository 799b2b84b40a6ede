/**
 * cuda_ipc's CudaIpcDriver over the addon (native/src/gpu/cuda_ipc.cc, each
 * method one CUDA driver call reached through dynlib's dlopen table). What it
 * adds to the bare calls:
 * - completion waits off the JS thread (eventWait: cuEventSynchronize on a
 *   libuv pool thread), so an ack leaves as soon as the copy is done. NB: a
 *   pending wait holds a pool thread (4 unless UV_THREADPOOL_SIZE); the copies
 *   complete in stream order, so waits queued behind the first four only start
 *   later, and other pool work (fs, dns) waits behind them meanwhile;
 * - one dedicated copy stream per device (created on first use), so the
 *   receiver's device-to-device copies never queue behind compute;
 * - a process-wide, reference-counted table of opened IPC memory handles:
 *   CUDA refuses to open one allocation twice in a process
 *   (CUDA_ERROR_ALREADY_MAPPED), and two pipes from the same peer may send
 *   from the same segment, so the second opener shares the first mapping and
 *   the last close unmaps it;
 * - typed errors: a failed call is a CudaIpcError naming the call and its
 *   CUresult; a driver that is not viable is a ChannelNotViableError.
 *
 * NB: no GPU has run this. It is tested against the stand-in libcuda of
 * test/native/cuda_standin.ts in two real processes
 * (test/native/cuda_ipc_native.test.ts).
 */
import { ChannelNotViableError, NativeError } from "../../errors/index.js";
import type { NativeCudaIpc, NativeCudaMemory } from "../../native/gpu.js";
import { CudaIpcError, type CudaIpcDriver } from "./driver.js";

type Gpu = NativeCudaIpc & Pick<NativeCudaMemory, "streamCreate" | "copyDtoDAsync">;

export interface NativeIpcOptions {
  /**
   * The stream tensors on `device` were produced on (the sender's event is recorded there). Default:
   * 0n, the legacy default stream, which is the CUDA tensor backend's until a stream is set current.
   * NB: a non-blocking stream made current in the tensor layer is not covered by 0n; pass its stream.
   */
  currentStream?: (device: number) => bigint;
}

/** Opened memory handles of this process: device + handle bytes -> mapping, shared by every channel. */
const opened = new Map<string, { base: bigint; refs: number }>();
const openedBases = new Map<string, string>();

/** A native failure as the channel's typed error. */
function typed(call: string, e: unknown): Error {
  if (e instanceof NativeError) {
    if (e.code === "ENOTVIABLE") return new ChannelNotViableError(`cuda_ipc: ${e.message}`);
    if (e.code === "ECUDA") return new CudaIpcError(call, e.errno, e.message);
  }
  return e as Error;
}

/** The native CudaIpcDriver over `gpu` (nativeGpu()). */
export function nativeIpcDriver(gpu: Gpu, opts: NativeIpcOptions = {}): CudaIpcDriver {
  const streams = new Map<number, bigint>();
  const call = <T>(name: string, f: () => T): T => {
    try {
      return f();
    } catch (e) {
      throw typed(name, e);
    }
  };
  return {
    addressRange: (device, ptr) => call("cuMemGetAddressRange", () => gpu.ipcAddressRange(device, ptr)),
    ipcGetMemHandle: (device, base) => call("cuIpcGetMemHandle", () => gpu.ipcGetMemHandle(device, base)),
    ipcOpenMemHandle(device, handle, flags) {
      const k = `${device}:${Buffer.from(handle).toString("hex")}`;
      const hit = opened.get(k);
      if (hit) {
        hit.refs++;
        return hit.base;
      }
      const base = call("cuIpcOpenMemHandle", () => gpu.ipcOpenMemHandle(device, handle, flags));
      opened.set(k, { base, refs: 1 });
      openedBases.set(`${device}:${base}`, k);
      return base;
    },
    ipcCloseMemHandle(device, base) {
      const k = openedBases.get(`${device}:${base}`);
      const hit = k === undefined ? undefined : opened.get(k);
      if (hit && --hit.refs > 0) return;
      if (k !== undefined) {
        opened.delete(k);
        openedBases.delete(`${device}:${base}`);
      }
      call("cuIpcCloseMemHandle", () => gpu.ipcCloseMemHandle(device, base));
    },
    eventCreate: (device, flags) => call("cuEventCreate", () => gpu.eventCreate(device, flags)),
    ipcGetEventHandle: (device, event) => call("cuIpcGetEventHandle", () => gpu.ipcGetEventHandle(device, event)),
    ipcOpenEventHandle: (device, handle) => call("cuIpcOpenEventHandle", () => gpu.ipcOpenEventHandle(device, handle)),
    eventRecord: (device, event, stream) => call("cuEventRecord", () => gpu.eventRecord(device, event, stream)),
    eventQuery: (device, event) => call("cuEventQuery", () => gpu.eventQuery(device, event)),
    async eventWait(device, event) {
      try {
        await call("cuEventSynchronize", () => gpu.eventWait(device, event));
      } catch (e) {
        throw typed("cuEventSynchronize", e);
      }
    },
    eventDestroy: (device, event) => call("cuEventDestroy", () => gpu.eventDestroy(device, event)),
    streamWaitEvent: (device, stream, event) =>
      call("cuStreamWaitEvent", () => gpu.streamWaitEvent(device, stream, event)),
    copyDtoDAsync: (device, dst, src, bytes, stream) =>
      call("cuMemcpyDtoDAsync", () => gpu.copyDtoDAsync(device, src, 0, dst, 0, bytes, stream, false)),
    currentStream: opts.currentStream ?? (() => 0n),
    copyStream(device) {
      let s = streams.get(device);
      if (s === undefined) streams.set(device, (s = call("cuStreamCreate", () => gpu.streamCreate(device))));
      return s;
    },
  };
}
