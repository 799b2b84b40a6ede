/**
 * The addon's block tracker (native/src/gpu/block_tracker.h), on the emulated device's memory
 * (cudaKernels("emulate"): trackBlock, sweepBlocks, trackedBlocks over memAlloc/memFree): the
 * V8 behaviour the CUDA backend's synchronous reclamation is built on, checked rather than assumed.
 * - a weak napi reference is cleared by the gc() that finds its owner dead, so a sweep later in
 *   the same synchronous job frees the block (a JS WeakRef is not: deref() keeps its target until
 *   the job ends, which is why the tracker is native);
 * - a minor GC (scavenge) clears the references of young owners too;
 * - an owner that is still referenced keeps its block, bytes intact, across any number of GCs and
 *   sweeps, and a block is freed once only.
 * NB: vitest runs these suites with --expose-gc (vitest.config.ts).
 */
import { describe, expect, it } from "vitest";
import { cudaKernels } from "../../sdk/native/cuda_kernels.js";
import { nativeOrSkip } from "./helpers.js";

const { skip } = nativeOrSkip();

interface Emu {
  memAlloc(device: number, bytes: number): bigint;
  memFree(device: number, ptr: bigint): number;
  memInfo(device: number): { free: number; total: number };
  copyHtoD(device: number, ptr: bigint, offset: number, src: Uint8Array): void;
  copyDtoH(device: number, ptr: bigint, offset: number, dst: Uint8Array): void;
  trackBlock(owner: object, device: number, ptr: bigint, bytes: number): void;
  sweepBlocks(): { bytes: number; blocks: number; failed: number };
  trackedBlocks(): { bytes: number; blocks: number; sweeps: number; freedBlocks: number };
}

const gc = (globalThis as { gc?: (o?: { type?: "minor" }) => void }).gc!;

describe.skipIf(skip !== null)("the block tracker", () => {
  const k = () => cudaKernels("emulate") as unknown as Emu;

  /** Allocates and tracks n blocks whose owners nothing keeps; the owners die when this returns. */
  function garbage(n: number, bytes: number): void {
    const e = k();
    for (let i = 0; i < n; i++) {
      const ptr = e.memAlloc(0, bytes);
      e.trackBlock({ handle: ptr }, 0, ptr, bytes);
    }
  }

  it("frees the blocks of collected owners in the same synchronous job, after a full or a minor GC", () => {
    const e = k();
    const before = settle();
    const free0 = e.memInfo(0).free;
    garbage(200, 4096);
    expect(e.trackedBlocks().blocks).toBe(before + 200);
    expect(e.memInfo(0).free).toBe(free0 - 200 * 4096);
    gc();
    expect(e.sweepBlocks()).toEqual({ bytes: 200 * 4096, blocks: 200, failed: 0 });
    expect(e.memInfo(0).free).toBe(free0);
    garbage(100, 1024);
    gc({ type: "minor" }); // young owners: a scavenge is enough
    expect(e.sweepBlocks()).toEqual({ bytes: 100 * 1024, blocks: 100, failed: 0 });
    expect(e.sweepBlocks()).toEqual({ bytes: 0, blocks: 0, failed: 0 }); // once only
    expect(e.trackedBlocks().blocks).toBe(before);
  });

  /** How many of the owners' blocks still hold their fill byte (in a frame of its own: nothing stays referenced). */
  function intact(owners: { handle: bigint; fill: number }[]): number {
    const out = new Uint8Array(256);
    let n = 0;
    for (const o of owners) {
      k().copyDtoH(0, o.handle, 0, out);
      if (out.every((b) => b === o.fill)) n++;
    }
    return n;
  }

  /** n tracked blocks of 256 B filled with their index, with their owners, and garbage between them. */
  function owned(n: number): { handle: bigint; fill: number }[] {
    const e = k();
    const kept: { handle: bigint; fill: number }[] = [];
    for (let i = 0; i < n; i++) {
      const ptr = e.memAlloc(0, 256);
      e.copyHtoD(0, ptr, 0, new Uint8Array(256).fill(i));
      const owner = { handle: ptr, fill: i };
      e.trackBlock(owner, 0, ptr, 256);
      kept.push(owner);
      garbage(3, 256);
    }
    return kept;
  }

  /** Frees what earlier tests left to collect, so that each test counts only its own blocks. */
  function settle(): number {
    gc();
    k().sweepBlocks();
    return k().trackedBlocks().blocks;
  }

  it("keeps the blocks of owners still referenced, their bytes intact", async () => {
    const e = k();
    const before = settle();
    const kept = owned(50);
    for (let round = 0; round < 3; round++) {
      gc({ type: "minor" });
      e.sweepBlocks();
      gc();
      e.sweepBlocks();
    }
    expect(intact(kept)).toBe(50);
    expect(e.trackedBlocks().blocks).toBe(before + 50);
    kept.length = 0;
    // NB: V8 may keep the odd dropped object referenced from this frame's registers until it returns, so
    // the last of them may need a turn of the event loop; all 50 come back, and once each
    let freed = 0;
    for (let round = 0; round < 5 && freed < 50 * 256; round++) {
      gc();
      freed += e.sweepBlocks().bytes;
      await new Promise((r) => setTimeout(r, 0));
    }
    expect(freed).toBe(50 * 256);
    expect(e.trackedBlocks().blocks).toBe(before);
  });

  it("a JS WeakRef keeps its target through gc() until the job ends, the tracker's reference does not", async () => {
    const e = k();
    settle();
    let owner: object | null = { n: 1 };
    const ref = new WeakRef(owner);
    const ptr = e.memAlloc(0, 64);
    e.trackBlock(owner, 0, ptr, 64);
    owner = null;
    gc();
    expect(ref.deref()).toBeDefined(); // KeepDuringJob: alive until this job ends
    expect(e.sweepBlocks().blocks).toBe(0); // the WeakRef keeps it alive, so the block stays
    await new Promise((r) => setTimeout(r, 0));
    gc();
    expect(ref.deref()).toBeUndefined();
    expect(e.sweepBlocks()).toEqual({ bytes: 64, blocks: 1, failed: 0 });
  });

  it("refuses an owner that is not an object", () => {
    const e = k();
    const ptr = e.memAlloc(0, 64);
    expect(() => e.trackBlock(5 as unknown as object, 0, ptr, 64)).toThrow(/owner must be an object/);
    expect(e.memFree(0, ptr)).toBe(64);
  });
});
