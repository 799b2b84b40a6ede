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
 * The transfer protocol is told in ./protocol.ts (IPC memory handles per
 * caching-allocator segment, opened once and cached by the receiver;
 * interprocess events for stream ordering; the sender's `done` only after the
 * receiver's copy completed) and joined to a pipe in ./channel.ts. Both run
 * against a driver interface (./driver.ts) and are tested on the CPU against
 * a stand-in driver (test/channel/cuda_ipc.test.ts).
 *
 * By default the driver is the addon's (./native_driver.ts): the context is
 * viable where the CUDA driver loads and reports a device; elsewhere
 * whyNotViable() names the first thing missing (the driver's reason).
 *
 * `npm run gpu:check` measures it between two processes sharing one GPU (on
 * an H200: 4-400 MB intact, 97-101 % of the device copy at 400 MB).
 */
import { ChannelNotViableError } from "../../errors/index.js";
import { type CudaDeviceInfo, type GpuLibrary, cudaDevices, gpuLibrary, nativeGpu } from "../../native/gpu.js";
import { CHANNEL_PRIORITY, type ChannelContext, registerChannel } from "../index.js";
import { cudaStagingContext } from "../cuda_staging/index.js";
import { directOrStaging } from "../cuda_staging/fallback.js";
import { createCudaIpcChannel } from "./channel.js";
import type { CudaIpcDriver } from "./driver.js";
import { nativeIpcDriver } from "./native_driver.js";

export interface CudaIpcDeps {
  /** The CUDA driver loader. */
  driver: GpuLibrary;
  /** This process's GPUs (empty when none). */
  devices(): CudaDeviceInfo[];
  /** Whether this build has the IPC data path. */
  dataPath: boolean;
  /** The IPC driver calls (./driver.ts); with dataPath, channels are built on it. */
  ipc?: CudaIpcDriver;
}

const NO_DATA_PATH = "this tprpc build has no cuda_ipc data path (the addon lacks the IPC calls; rebuild it)";

/** The addon's IPC calls, when it loaded and has them (built lazily: the driver is probed on first use). */
function nativeDeps(): CudaIpcDeps {
  let ipc: CudaIpcDriver | undefined;
  const gpu = (): ReturnType<typeof nativeGpu> => nativeGpu();
  return {
    driver: gpuLibrary("cuda"),
    devices: cudaDevices,
    get dataPath() {
      return typeof gpu()?.ipcGetMemHandle === "function";
    },
    get ipc() {
      const g = gpu();
      if (!ipc && g && typeof g.ipcGetMemHandle === "function") ipc = nativeIpcDriver(g);
      return ipc;
    },
  };
}

/** The cuda_ipc context; `deps` are injectable for tests (default: the addon's driver). */
export function createCudaIpcContext(deps: CudaIpcDeps = nativeDeps()): ChannelContext {
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
      const ipc = deps.ipc;
      // NB: where the IPC setup fails on either side, both fall back to cuda_staging together
      if (why() === undefined && ipc)
        return directOrStaging(
          b,
          (l) => Promise.resolve(createCudaIpcChannel(l, ipc)),
          (l) => cudaStagingContext.createChannel(l),
        ).then((r) => r.channel);
      return Promise.reject(
        new ChannelNotViableError(`cuda_ipc to "${b.peerName}" cannot be set up: ${why() ?? NO_DATA_PATH}`),
      );
    },
  };
}

export const cudaIpcContext: ChannelContext = createCudaIpcContext();
registerChannel(cudaIpcContext);
