/**
 * The addon's storage allocator (native/src/memory.cc): 64-byte alignment, zeroing, the pool
 * (reuse, bound, release on GC, in a child process with --expose-gc), shared-memory blocks
 * that another process can open, and typed NativeErrors on failure.
 */
import fs from "node:fs";
import { describe, expect, it } from "vitest";
import { NativeError } from "../../sdk/errors/index.js";
import { nativeOrSkip, runFixture } from "./helpers.js";

const { native, skip } = nativeOrSkip();
const MiB = 1 << 20;

interface Stats {
  cachedBytes: number;
  liveBytes: number;
  allocations: number;
  reuses: number;
  limitBytes: number;
  cachedBlocks: number;
  liveBlocks: number;
}

describe.skipIf(skip !== null)("native memory", () => {
  const n = native!;

  it("returns 64-byte aligned, zeroed ArrayBuffers of the exact length", () => {
    for (const size of [0, 1, 63, 100, 4096, 65_537, 3 * MiB + 5]) {
      const buf = n.alloc(size);
      expect(buf).toBeInstanceOf(ArrayBuffer);
      expect(buf.byteLength).toBe(size);
      expect(n.addressOf(buf) % 64).toBe(0);
      expect(new Uint8Array(buf).every((x) => x === 0)).toBe(true);
    }
  });

  it("backs typed arrays; addressOf follows the view's byteOffset", () => {
    const buf = n.alloc(1024);
    const f = new Float32Array(buf, 64, 8);
    f.set([1, 2, 3]);
    expect(n.addressOf(f) - n.addressOf(buf)).toBe(64);
    expect(Array.from(new Float32Array(buf, 64, 3))).toEqual([1, 2, 3]);
  });

  it("counts live blocks by size class and honours prefault", () => {
    const before = n.poolStats().liveBytes;
    const big = n.alloc(8 * MiB, { prefault: true });
    const after = n.poolStats() as Stats;
    expect(after.liveBytes - before).toBe(8 * MiB);
    expect(new Float64Array(big).every((x) => x === 0)).toBe(true);
  });

  it("releases blocks on GC, reuses them, stays bounded and reports external memory (child, --expose-gc)", () => {
    const { result: r } = runFixture<{
      before: Stats;
      held: Stats;
      released: Stats;
      afterReuse: Stats;
      bounded: Stats;
      empty: Stats;
      externalGrowth: number;
      externalAfter: number;
      reusedAddress: boolean;
      reusedZeroed: boolean;
      trimmed: number;
    }>("pool-gc.mjs", [n.path], { flags: ["--expose-gc"], timeoutMs: 30_000 });
    expect(r.held.liveBytes - r.before.liveBytes).toBe(32 * MiB);
    expect(r.held.allocations - r.before.allocations).toBe(32);
    expect(r.externalGrowth).toBeGreaterThanOrEqual(32 * MiB);
    // Collected: nothing live, all 32 blocks cached for reuse (within the 256 MiB default bound).
    expect(r.released.liveBytes).toBe(r.before.liveBytes);
    expect(r.released.cachedBytes - r.before.cachedBytes).toBe(32 * MiB);
    expect(r.externalAfter).toBeLessThan(MiB);
    expect(r.afterReuse.reuses - r.released.reuses).toBe(1);
    expect(r.afterReuse.allocations).toBe(r.released.allocations);
    expect(r.reusedAddress).toBe(true);
    expect(r.reusedZeroed).toBe(true);
    expect(r.bounded.limitBytes).toBe(4 * MiB);
    expect(r.bounded.cachedBytes).toBeLessThanOrEqual(4 * MiB);
    expect(r.trimmed).toBe(r.bounded.cachedBytes);
    expect(r.empty.cachedBytes).toBe(0);
    expect(r.empty.cachedBlocks).toBe(0);
  });

  it("serves worker_threads from the same pool; a worker's exit returns its storages (child)", () => {
    const { result: r } = runFixture<{
      before: number;
      inWorker: { live: number; simd: string };
      exitCode: number;
      after: Stats;
    }>("worker.mjs", [n.path]);
    expect(r.inWorker.live - r.before).toBe(2 * MiB);
    expect(r.inWorker.simd).toBe(n.capabilities().simd);
    expect(r.exitCode).toBe(0);
    expect(r.after.liveBytes).toBe(r.before);
    expect(r.after.cachedBytes).toBe(2 * MiB);
  });

  it("shares memfd-backed storages with another process without a copy", () => {
    const buf = n.alloc(MiB, { shared: true });
    const shm = n.sharedMemory(buf)!;
    expect(shm).not.toBeNull();
    expect(shm.fd).toBeGreaterThan(2);
    expect(shm.byteLength).toBe(MiB);
    expect(shm.path).toBe(`/proc/${process.pid}/fd/${shm.fd}`);
    expect(fs.readlinkSync(shm.path)).toMatch(/^\/memfd:tprpc-storage/);
    expect(n.addressOf(buf) % 64).toBe(0);

    const { result } = runFixture<{ written: number; size: number }>("shm-writer.mjs", [shm.path, "4096", "peer"]);
    expect(result).toEqual({ written: 4, size: MiB });
    expect(Buffer.from(buf, 4096, 4).toString("utf8")).toBe("peer");

    expect(n.sharedMemory(n.alloc(MiB))).toBeNull();
    expect(n.sharedMemory(new ArrayBuffer(8))).toBeNull();
  });

  it("detachBuffer empties every view and hands a pool block back at Node's next immediate, no GC needed", async () => {
    // NB: a size class no other test here allocates, so a collection freeing their garbage cannot interfere
    const size = 5 * MiB + 4096;
    const buf = n.alloc(size);
    const at = n.addressOf(buf);
    const view = new Float32Array(buf, 64, 16);
    view.fill(1);
    expect(n.detachBuffer(view)).toBe(true);
    expect([buf.byteLength, view.length]).toEqual([0, 0]);
    expect(n.detachBuffer(buf)).toBe(false); // already detached
    await new Promise((r) => setImmediate(r));
    // the block is back in the pool: the next allocation of its size class is that block
    const reuses = (n.poolStats() as Stats).reuses;
    const again = n.alloc(size);
    expect((n.poolStats() as Stats).reuses).toBe(reuses + 1);
    expect(n.addressOf(again)).toBe(at);
    expect(n.detachBuffer(new Uint8Array(16))).toBe(true); // V8's own buffers detach too
    expect(() => n.detachBuffer(42 as never)).toThrow(TypeError);
  });

  it("rejects bad sizes with RangeError/TypeError, not NativeError", () => {
    expect(() => n.alloc(-1)).toThrow(RangeError);
    expect(() => n.alloc(1.5)).toThrow(RangeError);
    expect(() => n.alloc(2 ** 50)).toThrow(RangeError);
    expect(() => n.alloc("8" as unknown as number)).toThrow(TypeError);
  });

  // NB: with vm.overcommit_memory=1 the kernel grants any mapping, so there is no failure to observe.
  const overcommit = fs.existsSync("/proc/sys/vm/overcommit_memory")
    ? fs.readFileSync("/proc/sys/vm/overcommit_memory", "utf8").trim()
    : "1";
  it.skipIf(overcommit === "1")("turns an allocation the OS refuses into NativeError ENOMEM", () => {
    let err: unknown;
    try {
      n.alloc(2 ** 45); // 32 TiB
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(NativeError);
    expect((err as NativeError).code).toBe("ENOMEM");
    expect((err as NativeError).errno).toBe(12);
    expect((err as NativeError).message).toMatch(/could not map 35184372088832 bytes/);
  });
});
