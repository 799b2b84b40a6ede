/**
 * The cuda_staging channel: the fallback for every pair with a GPU on either
 * side ("cuda-cuda", "cuda-cpu", "cpu-cuda") when nothing better is shared —
 * device memory is staged through pinned host memory and the host bytes
 * cross as a CPU transfer. Any two workers can use it (domain "any"), so it
 * ranks below every direct path: CUDA_STAGING_PRIORITY, under tcp's.
 *
 * The data path: ./schedule.ts plans 4 MiB chunks over two pinned slots,
 * ./staging.ts runs them (device -> pinned -> host lane -> pinned -> device,
 * copies overlapped), ./channel.ts joins that to a pipe (host bytes as chunk
 * messages over the bootstrap), ./native_driver.ts binds it to the addon.
 * Tested against stand-ins (test/channel/cuda_staging.test.ts,
 * test/native/cuda_staging_native.test.ts); no GPU run has checked it, so by
 * default (dataPath false) the context stays not viable.
 */
import { ChannelNotViableError } from "../../errors/index.js";
import { CHANNEL_PRIORITY, type ChannelContext, registerChannel } from "../index.js";
import { createCudaStagingChannel } from "./channel.js";
import type { StagingDriver } from "./staging.js";

/** Below tcp's (the slowest direct path), so it is chosen only where nothing direct exists. */
export const CUDA_STAGING_PRIORITY = CHANNEL_PRIORITY.tcp / 2;

export interface CudaStagingDeps {
  /** Whether this build has the staging data path. */
  dataPath: boolean;
  /** The driver calls (./staging.ts); with dataPath, channels are built on them. */
  calls?: StagingDriver;
}

const NO_DATA_PATH = "this tprpc build has no cuda_staging data path yet (device-host copies through pinned memory)";

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
      if (why() === undefined && deps.calls) return Promise.resolve(createCudaStagingChannel(b, deps.calls));
      return Promise.reject(
        new ChannelNotViableError(`cuda_staging to "${b.peerName}" cannot be set up: ${why() ?? NO_DATA_PATH}`),
      );
    },
  };
}

export const cudaStagingContext: ChannelContext = createCudaStagingContext();
registerChannel(cudaStagingContext);
