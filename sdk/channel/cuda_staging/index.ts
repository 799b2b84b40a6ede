/**
 * The cuda_staging channel: the fallback for every pair with a GPU on either
 * side ("cuda-cuda", "cuda-cpu", "cpu-cuda") when nothing better is shared —
 * device memory is staged through pinned host memory and the host bytes
 * cross as a CPU transfer. Any two workers can use it (domain "any"), so it
 * ranks below every direct path: CUDA_STAGING_PRIORITY, under tcp's.
 *
 * The protocol (to be built on a GPU machine, issue 9 part B):
 * 1. Sender with a GPU buffer: copy it device to host into a pinned block
 *    (cuMemAllocHost, pooled) on a stream that waits for the producer; a CPU
 *    buffer is sent as it is.
 * 2. The host bytes cross over a TCP connection the channel opens at setup
 *    (authenticated with the group secret, sdk/transport/auth.ts); `done`
 *    resolves once they are written (the GPU buffer was free after step 1).
 * 3. Receiver into a GPU destination: bytes land in a pinned block, then one
 *    host-to-device copy on the receiver's stream; into a CPU destination,
 *    directly.
 * This is the path PyTorch's RPC takes when tensors go through the CPU; the
 * recipe measures direct device maps against it.
 *
 * Until that data path exists the context is never viable.
 */
import { ChannelNotViableError } from "../../errors/index.js";
import { CHANNEL_PRIORITY, type ChannelContext, registerChannel } from "../index.js";

/** Below tcp's (the slowest direct path), so it is chosen only where nothing direct exists. */
export const CUDA_STAGING_PRIORITY = CHANNEL_PRIORITY.tcp / 2;

export interface CudaStagingDeps {
  /** Whether this build has the staging data path (false until issue 9 part B). */
  dataPath: boolean;
}

const NO_DATA_PATH =
  "this tprpc build has no cuda_staging data path yet (device-host copies through pinned memory; issue 9 part B)";

/** The cuda_staging context; `deps` are injectable for tests. */
export function createCudaStagingContext(deps: CudaStagingDeps = { dataPath: false }): ChannelContext {
  // NB: no CUDA check: a worker without GPUs takes part too (it only sends and receives host
  // bytes); the GPU side's pairs come from its device count in advertise().
  const why = (): string | undefined => (deps.dataPath ? undefined : NO_DATA_PATH);
  return {
    name: "cuda_staging",
    isViable: () => why() === undefined,
    whyNotViable: why,
    advertise(_host, devices) {
      // A worker without GPUs offers only cpu-cuda (host bytes to and from a GPU peer).
      const gpu = (devices.cuda ?? 0) > 0;
      return {
        name: "cuda_staging",
        priorities: gpu
          ? { "cuda-cuda": CUDA_STAGING_PRIORITY, "cuda-cpu": CUDA_STAGING_PRIORITY, "cpu-cuda": CUDA_STAGING_PRIORITY }
          : { "cpu-cuda": CUDA_STAGING_PRIORITY },
        domain: "any",
      };
    },
    createChannel(b) {
      return Promise.reject(
        new ChannelNotViableError(`cuda_staging to "${b.peerName}" cannot be set up: ${why() ?? NO_DATA_PATH}`),
      );
    },
  };
}

export const cudaStagingContext: ChannelContext = createCudaStagingContext();
registerChannel(cudaStagingContext);
