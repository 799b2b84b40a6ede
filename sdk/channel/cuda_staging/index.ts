/**
 * The cuda_staging channel: the fallback for every pair with a GPU on either
 * side ("cuda-cuda", "cuda-cpu", "cpu-cuda") when nothing better is shared —
 * device memory is staged through pinned host memory and the host bytes
 * cross as a CPU transfer. Any two workers can use it (domain "any"), so it
 * ranks below every direct path: CUDA_STAGING_PRIORITY, under tcp's.
 *
 * The data path: ./schedule.ts plans 4 MiB chunks over two pinned slots,
 * ./staging.ts runs them (device -> pinned -> host lane -> pinned -> device,
 * copies overlapped), ./channel.ts joins that to a pipe (the chunks cross
 * on an inner tcp channel's lane sockets, pinned slot to pinned slot),
 * ./fallback.ts lets cuda_ipc and nccl fall back to it at setup, and
 * ./native_driver.ts binds it to a CUDA memory API (the addon's driver calls,
 * or the emulated device's).
 *
 * Viability: the host side needs nothing, so the context is always viable
 * and a worker without GPUs serves "cpu-cuda" (host bytes to and from a GPU
 * peer). The device side needs a StagingDriver: sdk/index.ts provides one
 * (provideCudaStagingDriver) over the CUDA device backend's memory calls, and
 * only with one does a worker advertise the pairs with its GPUs.
 * Tested on the emulated device between processes (test/e2e/cuda_rpc.test.ts)
 * and against stand-ins (test/channel/cuda_staging.test.ts,
 * test/native/cuda_staging_native.test.ts). NB: no GPU run has checked it.
 */
import { ChannelNotViableError } from "../../errors/index.js";
import { CHANNEL_PRIORITY, type ChannelContext, registerChannel } from "../index.js";
import { createCudaStagingChannel } from "./channel.js";
import type { StagingDriver } from "./staging.js";

/** Below tcp's (the slowest direct path), so it is chosen only where nothing direct exists. */
export const CUDA_STAGING_PRIORITY = CHANNEL_PRIORITY.tcp / 2;

export interface CudaStagingDeps {
  /** Whether this build has the staging data path (false: never viable; tests). */
  dataPath: boolean;
  /** The device side's driver calls, or a source asked once per pipe (a string: why there are none). */
  calls?: StagingDriver | (() => StagingDriver | string);
}

const NO_DATA_PATH = "this tprpc build has no cuda_staging data path (device-host copies through pinned memory)";

/** The driver `deps` give, or why none. */
function driverOf(deps: CudaStagingDeps): StagingDriver | string {
  const c = deps.calls;
  if (c === undefined) return "no CUDA memory calls were provided for staging";
  return typeof c === "function" ? c() : c;
}

/** The cuda_staging context; `deps` are injectable for tests. */
export function createCudaStagingContext(deps: CudaStagingDeps = { dataPath: false }): ChannelContext {
  const why = (): string | undefined => (deps.dataPath ? undefined : NO_DATA_PATH);
  return {
    name: "cuda_staging",
    isViable: () => why() === undefined,
    whyNotViable: why,
    advertise(_host, devices) {
      // NB: GPU pairs only where this process can copy its device memory; else only cpu-cuda
      const gpu = (devices.cuda ?? 0) > 0 && typeof driverOf(deps) !== "string";
      return {
        name: "cuda_staging",
        priorities: gpu
          ? { "cuda-cuda": CUDA_STAGING_PRIORITY, "cuda-cpu": CUDA_STAGING_PRIORITY, "cpu-cuda": CUDA_STAGING_PRIORITY }
          : { "cpu-cuda": CUDA_STAGING_PRIORITY },
        domain: "any",
      };
    },
    createChannel(b) {
      const w = why();
      if (w !== undefined)
        return Promise.reject(new ChannelNotViableError(`cuda_staging to "${b.peerName}" cannot be set up: ${w}`));
      const d = driverOf(deps);
      return createCudaStagingChannel(b, d);
    },
  };
}

let provided: (() => StagingDriver | string) | null = null;
let resolved: StagingDriver | string | null = null;

/**
 * Gives the registered context its device side: `source` is asked once, on the first pipe with a
 * GPU pair, and returns the driver or why there is none (sdk/index.ts passes the CUDA device
 * backend's memory calls). Without it, this process stages host bytes only.
 */
export function provideCudaStagingDriver(source: () => StagingDriver | string): void {
  provided = source;
  resolved = null;
}

export const cudaStagingContext: ChannelContext = createCudaStagingContext({
  dataPath: true,
  calls: () => {
    if (resolved === null) {
      try {
        resolved = provided ? provided() : "no CUDA device backend provided staging calls";
      } catch (e) {
        resolved = `finding the staging calls failed: ${(e as Error).message}`;
      }
    }
    return resolved;
  },
});
registerChannel(cudaStagingContext);
