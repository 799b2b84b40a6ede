/**
 * CUDA memory comes back in synchronous loops (sdk/tensor/backend/cuda/index.ts: the block tracker
 * swept after GCs when the bytes allocated pass a budget), on the emulated device
 * (TPRPC_CUDA=emulate). The temporaries here are kernel outputs (raw.output: device memory with no
 * host allocation beside it, as on a GPU), so V8 sees almost nothing allocated and would not collect
 * on its own. No await anywhere in a loop.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Tensor, cuda, tensor } from "../../sdk/index.js";
import { CudaDeviceBackend } from "../../sdk/tensor/backend/cuda/index.js";
import { deviceBackendFor } from "../../sdk/tensor/backend/devices.js";
import { Device } from "../../sdk/tensor/device.js";
import * as raw from "../../sdk/tensor/raw.js";

// NB: read when cuda:0 is first used (sdk/index.ts), which is after these lines
process.env.TPRPC_CUDA = "emulate";
const savedBudget = process.env.TPRPC_CUDA_RECLAIM_MB;
delete process.env.TPRPC_CUDA_RECLAIM_MB;
afterAll(() => {
  if (savedBudget !== undefined) process.env.TPRPC_CUDA_RECLAIM_MB = savedBudget;
});

const MiB = 2 ** 20;
const dev = new Device("cuda", 0);
/** A 1 MiB temporary nothing keeps. */
const temp = (): Tensor => raw.output([MiB / 4], "float32", dev);

describe("CUDA memory in synchronous loops (emulated device)", () => {
  let b: CudaDeviceBackend;
  beforeAll(() => {
    if (!cuda.isAvailable()) throw new Error(`the emulated CUDA device is not viable: ${cuda.unavailableReason()}`);
    const got = deviceBackendFor("cuda");
    if (!(got instanceof CudaDeviceBackend)) throw new Error("not the CUDA device backend");
    b = got;
  });

  it("3,000 temporaries of 1 MiB keep memoryAllocated under 600 MB, without an await", () => {
    const before = cuda.memoryAllocated();
    cuda.resetPeakMemoryStats();
    const s0 = b.reclaimStats();
    for (let i = 0; i < 3000; i++) temp();
    const peak = cuda.maxMemoryAllocated() - before;
    const s = b.reclaimStats();
    expect(peak).toBeLessThan(600 * MiB); // 3,000 MiB without reclamation
    expect(s.reclaims - s0.reclaims).toBeGreaterThanOrEqual(5);
    expect(s.freedBytes - s0.freedBytes).toBeGreaterThan(2000 * MiB);
    expect(cuda.memoryAllocated() - before).toBeLessThan(600 * MiB);
  });

  it("keeps the tensors still referenced, contents intact, across reclaims", () => {
    const kept: { t: Tensor; v: number }[] = [];
    const big = tensor(
      Array.from({ length: MiB / 4 }, (_, i) => i % 1000),
      { dtype: "float32" },
    ).to("cuda:0");
    const s0 = b.reclaimStats();
    for (let i = 0; i < 1500; i++) {
      temp();
      if (i % 15 === 0) kept.push({ t: tensor([i, i + 0.5, -i], { dtype: "float32" }).to("cuda:0"), v: i });
    }
    expect(b.reclaimStats().reclaims - s0.reclaims).toBeGreaterThanOrEqual(2);
    expect(kept.length).toBe(100);
    for (const { t, v } of kept) expect(t.cpu().toArray()).toEqual([v, v + 0.5, -v]);
    const back = big.cpu().toArray();
    let bad = 0;
    for (let i = 0; i < back.length; i++) if (back[i] !== i % 1000) bad++;
    expect(bad).toBe(0);
  });

  it("falls back to a full GC when the garbage outlived minor GCs (promoted to V8's old generation)", () => {
    let held: Tensor[] | null = Array.from({ length: 400 }, temp);
    const gc = (globalThis as { gc?: (o?: { type: "minor" }) => void }).gc!;
    gc({ type: "minor" });
    gc({ type: "minor" }); // NB: survivors of two scavenges are promoted; only a full GC frees them now
    expect(held.length).toBe(400);
    held = null;
    const s0 = b.reclaimStats();
    expect(s0.trackedBytes).toBeGreaterThanOrEqual(400 * MiB);
    // allocate until the next reclaim runs: its sweep and minor GC find the 400 MiB still there
    for (let i = 0; i < 5000 && b.reclaimStats().reclaims === s0.reclaims; i++) temp();
    const s = b.reclaimStats();
    expect(s.reclaims).toBe(s0.reclaims + 1);
    expect(s.majorGcs).toBe(s0.majorGcs + 1);
    expect(s.trackedBytes).toBeLessThan(s0.trackedBytes - 300 * MiB);
  });

  it("a block is freed once: memoryAllocated never goes below what live tensors hold", () => {
    const live = Array.from({ length: 64 }, temp);
    for (let i = 0; i < 800; i++) temp();
    const gc = (globalThis as { gc?: () => void }).gc!;
    gc();
    const st = cuda.memoryStats();
    expect(st["allocated_bytes.all.current"]).toBeGreaterThanOrEqual(64 * MiB);
    expect(st["allocation.all.allocated"]! - st["allocation.all.freed"]!).toBeGreaterThanOrEqual(64);
    expect(b.api.trackedBlocks().blocks).toBe(st["allocation.all.allocated"]! - st["allocation.all.freed"]!);
    expect(live.length).toBe(64);
  });

  it("on a GPU sizes its budget to the device: 1/16 of its memory, within 256 MiB and 4 GiB", () => {
    const GiB = 1024 * MiB;
    const budgetFor = (total: number): number => {
      // NB: the emulated device's calls, with the memory size of a GPU's
      const gpu = new CudaDeviceBackend({ ...b.api, memInfo: () => ({ free: total, total }) }, 1, undefined, true);
      const mem = gpu.alloc(dev, 512, false);
      const budget = gpu.reclaimStats().budget;
      expect(mem.byteLength).toBe(512);
      return budget;
    };
    expect(budgetFor(141 * GiB)).toBe(4 * GiB); // an H200: capped
    expect(budgetFor(32 * GiB)).toBe(2 * GiB);
    expect(budgetFor(2 * GiB)).toBe(256 * MiB); // a small GPU: the floor
    // the emulated device (host memory) keeps 256 MiB, and so does a GPU given TPRPC_CUDA_RECLAIM_MB
    expect(b.reclaimStats().budget).toBeGreaterThanOrEqual(256 * MiB);
    process.env.TPRPC_CUDA_RECLAIM_MB = "64";
    try {
      const gpu = new CudaDeviceBackend(
        { ...b.api, memInfo: () => ({ free: 0, total: 141 * GiB }) },
        1,
        undefined,
        true,
      );
      gpu.alloc(dev, 512, false);
      expect(gpu.reclaimStats().budget).toBe(64 * MiB);
    } finally {
      delete process.env.TPRPC_CUDA_RECLAIM_MB;
    }
  });
});
