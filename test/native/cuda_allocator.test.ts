/**
 * The CUDA caching allocator, pinned host memory and staged copies
 * (native/src/gpu/caching_allocator.cc, host_allocator.cc, cuda_memory.cc)
 * against the stand-in driver of ./cuda_standin.ts, in a child process
 * (fixtures/cuda-allocator.mjs) with LD_LIBRARY_PATH set. The stand-in logs
 * every cuMemAlloc/cuMemFree, lets the test decide when events complete and
 * how much memory the "device" has, so the allocator's rules show as driver
 * calls: rounding, splitting and coalescing, reuse across streams only after
 * events, emptyCache, the out-of-memory retry, stats and copies.
 * NB: this checks the allocator's bookkeeping, not a GPU (npm run gpu:check does).
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { buildStandInDriver } from "./cuda_standin.js";
import { nativeOrSkip, runFixture } from "./helpers.js";

const { native, skip } = nativeOrSkip();
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-cuda-alloc-"));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

const KiB = 1024;
const MiB = 1 << 20;
interface Block {
  size: number;
  requested: number;
  state: string;
}
interface Segment {
  size: number;
  pool: "small" | "large";
  blocks: Block[];
}
type R = Record<string, Record<string, unknown>>;

const free = (size: number): Block => ({ size, requested: 0, state: "inactive" });
const used = (size: number, requested = size): Block => ({ size, requested, state: "active_allocated" });

describe.skipIf(skip !== null)("CUDA caching allocator over a stand-in driver", () => {
  let r: R;
  it("runs the scenarios in one child process", () => {
    const dir = buildStandInDriver(path.join(tmp, "driver"), native!.libraryTable().cuda.symbols);
    const log = path.join(tmp, "calls.log");
    r = runFixture<R>("cuda-allocator.mjs", [native!.path], {
      env: { LD_LIBRARY_PATH: dir, STANDIN_LOG: log },
    }).result;
    for (const [name, v] of Object.entries(r)) if (name !== "badFree") expect(v, name).not.toHaveProperty("error");
  });

  it("rounds to 512 B, carves small requests from one 2 MiB segment, splits and coalesces", () => {
    const s = r.splitCoalesce!;
    expect(s.bAt).toBe(1024); // 1000 B rounded to 1024, the next block right after it
    expect(s.afterAlloc).toEqual([
      { size: 2 * MiB, pool: "small", blocks: [used(1024, 1000), used(512), free(2 * MiB - 1536)] },
    ]);
    expect(s.stats).toEqual({ allocated: 1536, requested: 1512, reserved: 2 * MiB, segments: 1 });
    expect(s.afterFreeA).toEqual([
      { size: 2 * MiB, pool: "small", blocks: [free(1024), used(512), free(2 * MiB - 1536)] },
    ]);
    expect(s.afterFreeB).toEqual([{ size: 2 * MiB, pool: "small", blocks: [free(2 * MiB)] }]); // merged both ways
    expect(s.cAt).toBe(0); // best fit, lowest address: the coalesced block
    expect(s.calls).toEqual([`alloc ${2 * MiB}`]); // one cuMemAlloc for all of it
  });

  it("serves large requests from a 20 MiB segment, split while the rest exceeds 1 MiB", () => {
    const l = r.large!;
    const large = (l.snapshot as Segment[]).filter((x) => x.pool === "large");
    expect(large).toEqual([{ size: 20 * MiB, pool: "large", blocks: [used(5 * MiB), used(12 * MiB), free(3 * MiB)] }]);
    expect(l.large).toBe(20 * MiB);
    expect(l.calls).toEqual([`alloc ${20 * MiB}`]);
  });

  it("reuses a block used on another stream only after that stream's event completed", () => {
    const c = r.crossStream!;
    expect(c.pending).toEqual(["active_allocated", "active_pending_free", "inactive"]);
    expect(c.allocatedAfterFree).toBe(4 * KiB); // freed for the stats at once, reusable later
    expect(c.d2ReusedD1).toBe(false); // event not completed yet
    expect(c.d3ReusedD1).toBe(true); // completed: back in the pool
    expect(c.e2ReusedE1).toBe(false); // another stream's block is not handed to stream 0
    expect(c.e3ReusedE1).toBe(true);
    expect((c.segments as string[]).sort()).toEqual(["default", "default", "s"]);
    expect(c.calls).toEqual([`alloc ${2 * MiB}`]); // stream s got its own segment
    expect(c.afterStreamDestroy).toBe(2); // destroying s returned its unused segment
  });

  it("emptyCache returns every segment with nothing in use to the driver, and only those", () => {
    const e = r.emptyCache!;
    expect(e.before).toBe(2);
    expect(e.after).toEqual([{ size: 2 * MiB, pool: "small", blocks: [used(512, 100), free(2 * MiB - 512)] }]);
    expect(e.reserved).toBe(2 * MiB);
    expect(e.deviceFrees).toBe(2); // stream s's segment earlier, the large one now
    expect(e.calls).toEqual([`free ${20 * MiB}`]);
    expect(e.finally).toEqual({ segments: 0, reserved: 0, calls: [`free ${2 * MiB}`] });
  });

  it("on out of memory frees the cache and retries once, then throws EOOM with the sizes", () => {
    const o = r.oom!;
    expect(o.retried).toEqual({
      calls: [`oom ${22 * MiB}`, `free ${20 * MiB}`, `alloc ${22 * MiB}`],
      retries: 1,
      reserved: 22 * MiB,
    });
    expect(o.oomError).toEqual({
      name: "NativeError",
      code: "EOOM",
      message: expect.stringMatching(
        /^CUDA out of memory\. Tried to allocate 40\.00 MiB .*cuda:0 has a total capacity of 30\.00 MiB of which 8\.00 MiB is free\. 22\.00 MiB is allocated by tensors and 0\.00 MiB is reserved/,
      ),
    });
    expect(o.ooms).toBe(1);
    expect(o.calls).toEqual([`oom ${40 * MiB}`, `oom ${40 * MiB}`]);
  });

  it("keeps torch's memory stats: current, peak, allocated, freed; resetPeakMemoryStats", () => {
    expect(r.stats).toEqual({
      current: MiB,
      peak: 3 * MiB,
      allocated: 3 * MiB,
      freed: 2 * MiB,
      allocations: 1,
      reserved: 4 * MiB, // two 2 MiB small segments: 1 MiB requests fill one half each
      peakAfterReset: MiB,
      keys: 7 * 3 * 4 + 4,
    });
  });

  it("refuses to free a pointer it did not hand out", () => {
    expect(r.badFree).toEqual({
      error: { name: "NativeError", code: "EINVAL", message: expect.stringMatching(/did not hand out/) },
    });
  });

  it("hands out pinned host memory and copies through staging buffers or directly from pinned memory", () => {
    const p = r.pinned!;
    expect(p).toMatchObject({ byteLength: 10000, isPinned: true, isPinnedTail: true, pageable: false });
    expect(p.host).toEqual({
      allocated: 16 * KiB,
      peakAllocated: 16 * KiB,
      reserved: 16 * KiB,
      hostAllocs: 1,
      hostFrees: 0,
    });
    expect(p.pageableRoundTrip).toBe(true);
    expect(p.pinnedRoundTrip).toBe(true);
    const copies = (p.calls as string[]).filter((l) => !l.startsWith("eventsync"));
    expect(copies).toEqual([
      `alloc ${10 * MiB}`, // >= 10 MiB: a segment of its own, rounded to 2 MiB
      `hostalloc ${4 * MiB}`, // the two staging buffers
      `hostalloc ${4 * MiB}`,
      ...[4, 4, 2].map((m) => `htod ${m * MiB}`), // 10 MiB pageable: three staged chunks
      ...[4, 4, 2].map((m) => `dtoh ${m * MiB}`),
      "htod 10000", // pinned: one direct copy each way
      `hostalloc ${16 * KiB}`,
      "dtoh 10000",
    ]);
  });
});
