/**
 * The cuda_ipc channel: GPU memory to GPU memory between two processes on one
 * host, through CUDA IPC memory and event handles (no copy through the host).
 * It serves the "cuda-cuda" pair at CHANNEL_PRIORITY.cuda_ipc, the highest.
 *
 * Domain: the boot id and IPC namespace (CUDA IPC handles open only on the
 * same machine, in processes that share the IPC namespace); the advert's info
 * lists this process's GPUs by PCI bus id, so the peer can tell which
 * physical device a buffer is on.
 *
 * The transfer protocol (to be built on a GPU machine, issue 9 part B):
 * 1. Sender: cuIpcGetMemHandle for the allocation holding the buffer (cached
 *    per allocation), record an event on the sender's stream after the
 *    producer's work, cuIpcGetEventHandle; the descriptor carries
 *    {memHandle, offset, byteLength, eventHandle}.
 * 2. Receiver: cuIpcOpenMemHandle (cached per handle), make its stream wait on
 *    the opened event (so the copy starts after the producer finished), copy
 *    device to device into the destination on that stream, record an event.
 * 3. Receiver: when that event completes, send "done" over the bootstrap; the
 *    sender resolves `done` then, and only then may the caching allocator
 *    reuse the memory.
 * 4. close(): close every opened handle (cuIpcCloseMemHandle) and fail pending.
 *
 * Until that data path exists, the context is never viable: whyNotViable()
 * names the first thing missing (the driver's reason on machines without one).
 */
import { ChannelNotViableError } from "../../errors/index.js";
import { type CudaDeviceInfo, type GpuLibrary, cudaDevices, gpuLibrary } from "../../native/gpu.js";
import { CHANNEL_PRIORITY, type ChannelContext, registerChannel } from "../index.js";

export interface CudaIpcDeps {
  /** The CUDA driver loader. */
  driver: GpuLibrary;
  /** This process's GPUs (empty when none). */
  devices(): CudaDeviceInfo[];
  /** Whether this build has the IPC data path (false until issue 9 part B). */
  dataPath: boolean;
}

const NO_DATA_PATH =
  "this tprpc build has no cuda_ipc data path yet (IPC memory/event handles with stream ordering; issue 9 part B)";

/** The cuda_ipc context; `deps` are injectable for tests. */
export function createCudaIpcContext(
  deps: CudaIpcDeps = { driver: gpuLibrary("cuda"), devices: cudaDevices, dataPath: false },
): ChannelContext {
  const why = (): string | undefined => {
    if (!deps.driver.isViable()) return `cuda_ipc needs the CUDA driver: ${deps.driver.reason()}`;
    if (deps.devices().length === 0) return "cuda_ipc needs a CUDA device, and this process sees none";
    if (!deps.dataPath) return NO_DATA_PATH;
    return undefined;
  };
  return {
    name: "cuda_ipc",
    isViable: () => why() === undefined,
    whyNotViable: why,
    advertise(host, devices) {
      if (host.bootId === "" || (devices.cuda ?? 0) === 0) return null;
      return {
        name: "cuda_ipc",
        priorities: { "cuda-cuda": CHANNEL_PRIORITY.cuda_ipc },
        domain: `${host.bootId}/ipc:${host.namespaces.ipc ?? "?"}`,
        info: { pciBusIds: deps.devices().map((d) => d.pciBusId) },
      };
    },
    createChannel(b) {
      return Promise.reject(
        new ChannelNotViableError(`cuda_ipc to "${b.peerName}" cannot be set up: ${why() ?? NO_DATA_PATH}`),
      );
    },
  };
}

export const cudaIpcContext: ChannelContext = createCudaIpcContext();
registerChannel(cudaIpcContext);
