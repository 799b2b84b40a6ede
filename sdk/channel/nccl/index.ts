/**
 * The nccl channel: GPU memory to GPU memory between hosts (or on one host
 * without CUDA IPC), as NCCL point-to-point send/recv on a two-rank
 * communicator per pipe. It serves "cuda-cuda" at CHANNEL_PRIORITY.nccl,
 * below cuda_ipc and UCX-with-CUDA.
 *
 * Domain: the NCCL major.minor version (ranks of one communicator must run
 * the same NCCL), so mismatched peers fall back to another channel.
 *
 * The setup and transfers are told in ./bootstrap.ts (rank 0 = acceptor makes
 * the ncclUniqueId and sends it over the pipe's control connection; both ranks
 * ncclCommInitRank(2); both results are exchanged so a failure on either rank
 * makes both fall back to cuda_staging), over the driver
 * interface of ./driver.ts, tested against a stand-in (test/channel/nccl.test.ts).
 *
 * NB: NCCL needs one GPU per rank. The machines lent to this project have one
 * GPU, so NCCL cannot run there, and no device run has checked this path. By
 * default the calls are the addon's (./native_driver.ts): the context is viable
 * where the CUDA driver and libnccl.so.2 load and a device is seen; elsewhere
 * whyNotViable() names the first missing piece. On one GPU shared by two
 * processes ncclCommInitRank fails on both ranks with NcclError, and
 * createChannel falls back to cuda_staging on both sides together
 * (../cuda_staging/fallback.ts).
 */
import { ChannelNotViableError } from "../../errors/index.js";
import { type CudaDeviceInfo, type GpuLibrary, cudaDevices, gpuLibrary, nativeGpu } from "../../native/gpu.js";
import { CHANNEL_PRIORITY, type ChannelContext, registerChannel } from "../index.js";
import { cudaStagingContext } from "../cuda_staging/index.js";
import { directOrStaging } from "../cuda_staging/fallback.js";
import { setupNcclChannel } from "./bootstrap.js";
import type { NcclDriver } from "./driver.js";
import { nativeNcclDriver } from "./native_driver.js";

export interface NcclDeps {
  driver: GpuLibrary;
  nccl: GpuLibrary;
  devices(): CudaDeviceInfo[];
  /** Whether this build has the NCCL data path. */
  dataPath: boolean;
  /** The NCCL calls (./driver.ts); with dataPath, channels are built on them (on GPU 0). */
  calls?: NcclDriver;
}

const NO_DATA_PATH = "this tprpc build has no nccl data path (the addon lacks the NCCL calls; rebuild it)";

/** The addon's NCCL calls, when it loaded and has them (built on first use). */
function nativeDeps(): NcclDeps {
  let calls: NcclDriver | undefined;
  return {
    driver: gpuLibrary("cuda"),
    nccl: gpuLibrary("nccl"),
    devices: cudaDevices,
    get dataPath() {
      return typeof nativeGpu()?.ncclSend === "function";
    },
    get calls() {
      const g = nativeGpu();
      if (!calls && g && typeof g.ncclSend === "function") calls = nativeNcclDriver(g);
      return calls;
    },
  };
}

/** The nccl context; `deps` are injectable for tests (default: the addon's calls). */
export function createNcclContext(deps: NcclDeps = nativeDeps()): ChannelContext {
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
      const calls = deps.calls;
      // NB: where the communicator cannot be built on either side, both fall back to cuda_staging together
      if (why() === undefined && calls)
        return directOrStaging(
          b,
          (l) => setupNcclChannel(l, calls, 0),
          (l) => cudaStagingContext.createChannel(l),
        ).then((r) => r.channel);
      return Promise.reject(
        new ChannelNotViableError(`nccl to "${b.peerName}" cannot be set up: ${why() ?? NO_DATA_PATH}`),
      );
    },
  };
}

export const ncclContext: ChannelContext = createNcclContext();
registerChannel(ncclContext);
