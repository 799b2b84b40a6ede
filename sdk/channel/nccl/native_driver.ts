/**
 * The nccl channel's NcclDriver over the addon (native/src/gpu/nccl.cc, libnccl.so.2 loaded with
 * dlopen; events and streams from native/src/gpu/cuda_ipc.cc and cuda_memory.cc). What it adds to
 * the bare calls:
 * - each communicator remembers its device, so send/recv run in that device's context;
 * - a fence is an event from a per-device pool, recorded on the stream; while it is pending, each
 *   query also asks ncclCommGetAsyncError for the stream's communicator, so a peer that died or a
 *   failed kernel rejects the transfer (NcclError) instead of leaving it pending forever;
 * - typed errors: a failed NCCL call is an NcclError (its ncclResult_t), a missing library or
 *   symbol a ChannelNotViableError, a failed CUDA call a CudaIpcError.
 *
 * NB: NCCL needs one GPU per rank. The machines lent to this project have one GPU, so NCCL cannot
 * run there, and no device has run this file. It is tested against a stand-in libnccl compiled by
 * test/native/nccl_lib_standin.ts, in two real processes (test/native/nccl_native.test.ts).
 */
import { ChannelNotViableError, NativeError } from "../../errors/index.js";
import type { NativeCudaIpc, NativeCudaMemory, NativeNccl } from "../../native/gpu.js";
import { CudaIpcError, CU_EVENT_DISABLE_TIMING } from "../cuda_ipc/driver.js";
import { NcclError, type NcclDriver } from "./driver.js";

type Gpu = NativeNccl &
  Pick<NativeCudaIpc, "eventCreate" | "eventRecord" | "eventQuery"> &
  Pick<NativeCudaMemory, "streamCreate"> & { ncclUniqueId(): Uint8Array };

function typed(call: string, e: unknown): Error {
  if (!(e instanceof NativeError)) return e as Error;
  if (e.code === "ENOTVIABLE") return new ChannelNotViableError(`nccl: ${e.message}`);
  if (e.code === "ENCCL") return new NcclError(call, e.errno, e.message);
  if (e.code === "ECUDA") return new CudaIpcError(call, e.errno, e.message);
  return e;
}

/** The native NcclDriver over `gpu` (nativeGpu()). */
export function nativeNcclDriver(gpu: Gpu): NcclDriver {
  const deviceOf = new Map<bigint, number>();
  const commOf = new Map<bigint, bigint>(); // stream -> the communicator last queued on it
  const events = new Map<number, bigint[]>(); // free fence events per device
  const call = <T>(name: string, f: () => T): T => {
    try {
      return f();
    } catch (e) {
      throw typed(name, e);
    }
  };
  const device = (comm: bigint): number => {
    const d = deviceOf.get(comm);
    if (d === undefined) throw new ChannelNotViableError("nccl: a communicator this driver did not create");
    return d;
  };
  return {
    getUniqueId: () => call("ncclGetUniqueId", () => gpu.ncclUniqueId()),
    async commInitRank(dev, nranks, id, rank) {
      try {
        const comm = await call("ncclCommInitRank", () => gpu.ncclCommInitRank(dev, nranks, id, rank));
        deviceOf.set(comm, dev);
        return comm;
      } catch (e) {
        throw typed("ncclCommInitRank", e);
      }
    },
    commAbort(comm) {
      deviceOf.delete(comm);
      call("ncclCommAbort", () => gpu.ncclCommAbort(comm));
    },
    commDestroy(comm) {
      deviceOf.delete(comm);
      call("ncclCommDestroy", () => gpu.ncclCommDestroy(comm));
    },
    streamCreate: (dev) => call("cuStreamCreate", () => gpu.streamCreate(dev)),
    send(comm, ptr, bytes, peer, stream) {
      commOf.set(stream, comm);
      call("ncclSend", () => gpu.ncclSend(device(comm), comm, ptr, bytes, peer, stream));
    },
    recv(comm, ptr, bytes, peer, stream) {
      commOf.set(stream, comm);
      call("ncclRecv", () => gpu.ncclRecv(device(comm), comm, ptr, bytes, peer, stream));
    },
    fence(dev, stream) {
      const pool = events.get(dev) ?? [];
      events.set(dev, pool);
      const ev = pool.pop() ?? call("cuEventCreate", () => gpu.eventCreate(dev, CU_EVENT_DISABLE_TIMING));
      call("cuEventRecord", () => gpu.eventRecord(dev, ev, stream));
      let done = false;
      return () => {
        if (done) return true;
        if (call("cuEventQuery", () => gpu.eventQuery(dev, ev))) {
          done = true;
          pool.push(ev);
          return true;
        }
        const comm = commOf.get(stream);
        if (comm !== undefined && deviceOf.has(comm)) {
          const async = call("ncclCommGetAsyncError", () => gpu.ncclCommGetAsyncError(comm));
          if (async !== 0 && async !== 7)
            throw new NcclError("ncclCommGetAsyncError", async, gpu.ncclErrorString(async));
        }
        return false;
      };
    },
  };
}
