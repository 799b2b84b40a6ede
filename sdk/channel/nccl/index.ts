/**
 * The nccl channel: GPU memory to GPU memory between hosts (or on one host
 * without CUDA IPC), as NCCL point-to-point send/recv on a two-rank
 * communicator per pipe. It serves "cuda-cuda" at CHANNEL_PRIORITY.nccl,
 * below cuda_ipc and UCX-with-CUDA.
 *
 * Domain: the NCCL major.minor version (ranks of one communicator must run
 * the same NCCL), so mismatched peers fall back to another channel.
 *
 * The protocol (to be built on a GPU machine, issue 9 part B):
 * 1. Setup over the pipe's control connection: the acceptor is rank 0; it
 *    calls ncclGetUniqueId (sdk/native/gpu.ts) and sends the 128-byte id
 *    through the bootstrap; both sides call ncclCommInitRank(comm, 2, id,
 *    rank) off the JS thread, bounded by bootstrap.timeoutMs (ncclCommAbort
 *    on timeout).
 * 2. send: ncclSend(buffer, peer) on the channel's stream after an event
 *    from the producer's stream; `done` resolves when the stream passes it.
 * 3. recv: ncclRecv(into, peer) in the order of the sends (NCCL matches
 *    point-to-point calls in order, which the channel interface guarantees).
 * 4. close(): ncclCommAbort if transfers are pending, else ncclCommDestroy.
 *
 * Until that data path exists the context is never viable; whyNotViable()
 * names the first missing piece.
 */
import { ChannelNotViableError } from "../../errors/index.js";
import { type CudaDeviceInfo, type GpuLibrary, cudaDevices, gpuLibrary } from "../../native/gpu.js";
import { CHANNEL_PRIORITY, type ChannelContext, registerChannel } from "../index.js";

export interface NcclDeps {
  driver: GpuLibrary;
  nccl: GpuLibrary;
  devices(): CudaDeviceInfo[];
  /** Whether this build has the NCCL data path (false until issue 9 part B). */
  dataPath: boolean;
}

const NO_DATA_PATH = "this tprpc build has no nccl data path yet (communicator per pipe, send/recv; issue 9 part B)";

/** The nccl context; `deps` are injectable for tests. */
export function createNcclContext(
  deps: NcclDeps = { driver: gpuLibrary("cuda"), nccl: gpuLibrary("nccl"), devices: cudaDevices, dataPath: false },
): ChannelContext {
  const why = (): string | undefined => {
    if (!deps.driver.isViable()) return `nccl needs the CUDA driver: ${deps.driver.reason()}`;
    if (!deps.nccl.isViable()) return `nccl needs libnccl: ${deps.nccl.reason()}`;
    if (deps.devices().length === 0) return "nccl needs a CUDA device, and this process sees none";
    if (!deps.dataPath) return NO_DATA_PATH;
    return undefined;
  };
  return {
    name: "nccl",
    isViable: () => why() === undefined,
    whyNotViable: why,
    advertise(_host, devices) {
      if ((devices.cuda ?? 0) === 0) return null;
      const v = (deps.nccl.version() ?? "unknown").split(".").slice(0, 2).join(".");
      return { name: "nccl", priorities: { "cuda-cuda": CHANNEL_PRIORITY.nccl }, domain: `nccl-${v}` };
    },
    createChannel(b) {
      return Promise.reject(
        new ChannelNotViableError(`nccl to "${b.peerName}" cannot be set up: ${why() ?? NO_DATA_PATH}`),
      );
    },
  };
}

export const ncclContext: ChannelContext = createNcclContext();
registerChannel(ncclContext);
