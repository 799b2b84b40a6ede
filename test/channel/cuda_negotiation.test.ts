/**
 * Channel choice for GPU device pairs, with the pipe's negotiate() over
 * Capabilities built from the cuda_ipc, nccl and cuda_staging contexts' own
 * adverts (their library and device inputs faked: two GPUs per worker,
 * given NCCL versions) beside hand-written shm / tcp / ucx adverts:
 * cuda_ipc on one host, UCX-with-CUDA or NCCL across hosts, staging through
 * host memory as the fallback, and both sides reaching the same choice.
 * Then the contexts as they are on this machine: registered, not viable, with
 * reasons, and setup refused with ChannelNotViableError.
 */
import { describe, expect, it } from "vitest";
import {
  type Capabilities,
  type ChannelAdvert,
  type ChannelContext,
  type HostIdentity,
  getChannel,
} from "../../sdk/channel/index.js";
import { createCudaIpcContext } from "../../sdk/channel/cuda_ipc/index.js";
import { CUDA_STAGING_PRIORITY, createCudaStagingContext } from "../../sdk/channel/cuda_staging/index.js";
import { createNcclContext } from "../../sdk/channel/nccl/index.js";
import type { StagingDriver } from "../../sdk/channel/cuda_staging/staging.js";

/** Staging calls for contexts that only advertise: negotiation copies nothing. */
const NO_COPIES = {} as StagingDriver;
import { ChannelNotViableError } from "../../sdk/errors/index.js";
import { type CudaDeviceInfo, type GpuLibrary, gpuLibrary } from "../../sdk/native/gpu.js";
import { CAPABILITIES_VERSION, flipNegotiation, negotiate } from "../../sdk/pipe/negotiate.js";

/** A loader that reports the library usable (test input; no library is loaded). */
const usable = (name: "cuda" | "nccl", version: string): GpuLibrary => ({
  name,
  isViable: () => true,
  reason: () => null,
  version: () => version,
});
const twoGpus = (): CudaDeviceInfo[] =>
  [0, 1].map((i) => ({
    index: i,
    name: "GPU",
    pciBusId: `0000:${(0x3b + i).toString(16)}:00.0`,
    major: 9,
    minor: 0,
    multiProcessors: 132,
    unifiedAddressing: true,
  }));

function host(bootId: string, ipc = "4026531839"): HostIdentity {
  return { hostname: `h-${bootId}`, bootId, namespaces: { ipc, pid: "1", user: "2" }, pid: 10, uid: 0 };
}

const tcp: ChannelAdvert = { name: "tcp", priorities: { "cpu-cpu": 100 }, domain: "any" };
const shm = (h: HostIdentity): ChannelAdvert => ({ name: "shm", priorities: { "cpu-cpu": 400 }, domain: h.bootId });
/** UCX built with CUDA support (as the ucx context would advertise it), on a fabric `fabric`. */
const ucxCuda = (fabric: string): ChannelAdvert => ({
  name: "ucx",
  priorities: { "cpu-cpu": 200, "cuda-cuda": 550, "cpu-cuda": 550, "cuda-cpu": 550 },
  domain: fabric,
});

interface Worker {
  name: string;
  host?: HostIdentity;
  gpus?: number;
  ncclVersion?: string | null;
  ucx?: string | null;
  /** false: the cuda_ipc driver is not viable here, so (as localCapabilities does) it is not advertised. */
  ipc?: boolean;
}

/** A worker's Capabilities: the GPU contexts' real adverts plus shm/tcp (and ucx when given). */
function caps(w: Worker): Capabilities {
  const h = w.host ?? host("boot-a");
  const devices = { cpu: 1, cuda: w.gpus ?? 2 };
  const gpuDevices = () => (devices.cuda > 0 ? twoGpus().slice(0, devices.cuda) : []);
  const contexts: ChannelContext[] = [
    createCudaIpcContext({ driver: usable("cuda", "12.4"), devices: gpuDevices, dataPath: w.ipc !== false }),
    createCudaStagingContext({ dataPath: true, calls: NO_COPIES }),
  ].filter((c) => c.isViable());
  if (w.ncclVersion !== null)
    contexts.push(
      createNcclContext({
        driver: usable("cuda", "12.4"),
        nccl: usable("nccl", w.ncclVersion ?? "2.21.5"),
        devices: gpuDevices,
        dataPath: true,
      }),
    );
  const channels = contexts.map((c) => c.advertise(h, devices)).filter((a): a is ChannelAdvert => a !== null);
  channels.push(shm(h), tcp);
  if (w.ucx) channels.push(ucxCuda(w.ucx));
  return { version: CAPABILITIES_VERSION, name: w.name, host: h, devices, channels };
}

/** negotiate() from a's side, checked to agree with b's (flipped). */
function choose(a: Capabilities, b: Capabilities) {
  const n = negotiate(a, b);
  expect(flipNegotiation(negotiate(b, a))).toEqual(n);
  return n;
}

describe("GPU pairs: which channel negotiate() picks", () => {
  it("one host: cuda_ipc for GPU to GPU, UCX-with-CUDA for the mixed pairs, shm for CPU", () => {
    const n = choose(caps({ name: "a", ucx: "ib0" }), caps({ name: "b", ucx: "ib0" }));
    expect(n.choice).toEqual({ "cpu-cpu": "shm", "cpu-cuda": "ucx", "cuda-cpu": "ucx", "cuda-cuda": "cuda_ipc" });
    expect(n.missing).toEqual({});
  });

  it("one host without UCX: the mixed pairs fall back to staging through host memory", () => {
    const n = choose(caps({ name: "a" }), caps({ name: "b" }));
    expect(n.choice).toEqual({
      "cpu-cpu": "shm",
      "cpu-cuda": "cuda_staging",
      "cuda-cpu": "cuda_staging",
      "cuda-cuda": "cuda_ipc",
    });
  });

  it("one host but separate IPC namespaces (containers): NCCL instead of CUDA IPC", () => {
    const n = choose(caps({ name: "a", host: host("boot-a", "1") }), caps({ name: "b", host: host("boot-a", "2") }));
    expect(n.choice["cuda-cuda"]).toBe("nccl");
  });

  it("across hosts: UCX-with-CUDA when both have it, else NCCL; CPU over tcp", () => {
    const withUcx = choose(
      caps({ name: "a", host: host("boot-a"), ucx: "ib0" }),
      caps({ name: "b", host: host("boot-b"), ucx: "ib0" }),
    );
    expect(withUcx.choice).toEqual({ "cpu-cpu": "ucx", "cpu-cuda": "ucx", "cuda-cpu": "ucx", "cuda-cuda": "ucx" });
    const plain = choose(caps({ name: "a", host: host("boot-a") }), caps({ name: "b", host: host("boot-b") }));
    expect(plain.choice).toEqual({
      "cpu-cpu": "tcp",
      "cpu-cuda": "cuda_staging",
      "cuda-cpu": "cuda_staging",
      "cuda-cuda": "nccl",
    });
  });

  it("across hosts with different NCCL versions, or NCCL on one side only: staging", () => {
    const far = (v: string | null, name: string, boot: string) => caps({ name, host: host(boot), ncclVersion: v });
    expect(choose(far("2.21.5", "a", "boot-a"), far("2.18.1", "b", "boot-b")).choice["cuda-cuda"]).toBe("cuda_staging");
    expect(choose(far("2.21.5", "a", "boot-a"), far(null, "b", "boot-b")).choice["cuda-cuda"]).toBe("cuda_staging");
    // patch releases of one NCCL minor version do talk
    expect(choose(far("2.21.5", "a", "boot-a"), far("2.21.3", "b", "boot-b")).choice["cuda-cuda"]).toBe("nccl");
  });

  it("prefers cuda_ipc where both drivers are viable, then nccl, then staging", () => {
    expect(choose(caps({ name: "a" }), caps({ name: "b" })).choice["cuda-cuda"]).toBe("cuda_ipc");
    // one side's cuda_ipc driver says not viable: it is not offered, and nccl carries the pair
    expect(choose(caps({ name: "a", ipc: false }), caps({ name: "b" })).choice["cuda-cuda"]).toBe("nccl");
    // neither direct driver on one side: staging through host memory
    expect(choose(caps({ name: "a", ipc: false, ncclVersion: null }), caps({ name: "b" })).choice["cuda-cuda"]).toBe(
      "cuda_staging",
    );
  });

  it("a GPU worker and a CPU-only worker: staging for the GPU's tensors, shm for the CPU's", () => {
    const n = choose(caps({ name: "gpu" }), caps({ name: "cpuonly", gpus: 0 }));
    expect(n.choice).toEqual({ "cpu-cpu": "shm", "cuda-cpu": "cuda_staging" });
    expect(n.missing).toEqual({});
  });

  it("ranks staging below every direct path", () => {
    expect(CUDA_STAGING_PRIORITY).toBeLessThan(100);
    const a = caps({ name: "a" });
    const staging = a.channels.find((c) => c.name === "cuda_staging")!;
    expect(staging.priorities).toEqual({
      "cuda-cuda": CUDA_STAGING_PRIORITY,
      "cuda-cpu": CUDA_STAGING_PRIORITY,
      "cpu-cuda": CUDA_STAGING_PRIORITY,
    });
  });

  it("offers no GPU-only channel without GPUs, and no cuda_ipc without a boot id", () => {
    const ipc = createCudaIpcContext({ driver: usable("cuda", "12.4"), devices: twoGpus, dataPath: true });
    expect(ipc.advertise(host("b"), { cpu: 1, cuda: 0 })).toBeNull();
    expect(ipc.advertise(host(""), { cpu: 1, cuda: 2 })).toBeNull();
    expect(ipc.advertise(host("b"), { cpu: 1, cuda: 2 })?.info).toEqual({
      pciBusIds: ["0000:3b:00.0", "0000:3c:00.0"],
    });
    const nccl = createNcclContext({
      driver: usable("cuda", "12.4"),
      nccl: usable("nccl", "2.21.5"),
      devices: twoGpus,
      dataPath: true,
    });
    expect(nccl.advertise(host("b"), { cpu: 1, cuda: 0 })).toBeNull();
    expect(nccl.advertise(host("b"), { cpu: 1, cuda: 1 })?.domain).toBe("nccl-2.21");
  });
});

describe("the GPU channel contexts on this machine", () => {
  it.skipIf(gpuLibrary("cuda").isViable())("are registered; the direct ones not viable, saying why", () => {
    for (const name of ["cuda_ipc", "nccl"]) {
      const ctx = getChannel(name)!;
      expect(ctx).toBeDefined();
      expect(ctx.isViable()).toBe(false);
    }
    expect(getChannel("cuda_ipc")!.whyNotViable!()).toMatch(/^cuda_ipc needs the CUDA driver: .+/);
    expect(getChannel("nccl")!.whyNotViable!()).toMatch(/^nccl needs the CUDA driver: .+/);
    // staging's host side needs nothing: viable everywhere, GPU pairs only with a CUDA device's copies
    expect(getChannel("cuda_staging")!.isViable()).toBe(true);
    expect(getChannel("cuda_staging")!.advertise(host("b"), { cpu: 1, cuda: 0 })?.priorities).toEqual({
      "cpu-cuda": CUDA_STAGING_PRIORITY,
    });
    const noCalls = createCudaStagingContext({ dataPath: true });
    expect(noCalls.advertise(host("b"), { cpu: 1, cuda: 2 })?.priorities).toEqual({
      "cpu-cuda": CUDA_STAGING_PRIORITY,
    });
    expect(createCudaStagingContext({ dataPath: false }).whyNotViable!()).toMatch(/no cuda_staging data path/);
  });

  it("are not viable even with a usable driver and devices when the build lacks the data path", () => {
    const ipc = createCudaIpcContext({ driver: usable("cuda", "12.4"), devices: twoGpus, dataPath: false });
    expect(ipc.isViable()).toBe(false);
    expect(ipc.whyNotViable!()).toMatch(/no cuda_ipc data path/);
    const noDevice = createCudaIpcContext({ driver: usable("cuda", "12.4"), devices: () => [], dataPath: true });
    expect(noDevice.whyNotViable!()).toBe("cuda_ipc needs a CUDA device, and this process sees none");
  });

  it("refuse setup with ChannelNotViableError naming the peer and the reason", async () => {
    const b = { peerName: "worker1" } as Parameters<ChannelContext["createChannel"]>[0];
    for (const name of ["cuda_ipc", "nccl"]) {
      const p = getChannel(name)!.createChannel(b);
      await expect(p).rejects.toThrow(ChannelNotViableError);
      await expect(p).rejects.toThrow(new RegExp(`^${name} to "worker1" cannot be set up: `));
    }
  });
});
