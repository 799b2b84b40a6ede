/**
 * cuda_staging on the CPU: the chunk plan and the sender's step order as pure
 * functions, then the data path (device -> pinned -> lane -> pinned ->
 * device) against the in-memory stand-in driver, for sizes that are not
 * multiples of the chunk, with copies that happen only when the test
 * completes the stand-in's events. No GPU ran this.
 */
import { describe, expect, it } from "vitest";
import { senderSteps, stagingChunks, STAGING_CHUNK_BYTES } from "../../sdk/channel/cuda_staging/schedule.js";
import { Stager } from "../../sdk/channel/cuda_staging/staging.js";
import { createCudaStagingContext } from "../../sdk/channel/cuda_staging/index.js";
import type { ChannelBuffer, DeviceBuffer } from "../../sdk/channel/interface.js";
import { ValueError, WorkerUnavailableError } from "../../sdk/errors/index.js";
import { GpuWorld, StandinDriver, bootstrapPair } from "./gpu_standin.js";
import { StagingStandin, lanePair } from "./staging_standin.js";

const MiB = 1 << 20;

/** The bytes of the binary fields in a setup message. */
function binaryBytes(m: unknown): number {
  if (m instanceof Uint8Array) return m.byteLength;
  if (m === null || typeof m !== "object") return 0;
  return Object.values(m as Record<string, unknown>).reduce<number>((n, v) => n + binaryBytes(v), 0);
}

function pair(opts: { chunkBytes?: number } = {}) {
  const world = new GpuWorld();
  const a = new StandinDriver(world, "A");
  const b = new StandinDriver(world, "B");
  const ta: string[] = [];
  const tb: string[] = [];
  const sa = new Stager(new StagingStandin(world, a), { ...opts, trace: (s) => ta.push(s) });
  const sb = new Stager(new StagingStandin(world, b), { ...opts, trace: (s) => tb.push(s) });
  return { world, a, b, sa, sb, ta, tb };
}

/** Seeded bytes (a small LCG). */
function fill(v: Uint8Array, seed: number): void {
  let x = seed >>> 0;
  for (let i = 0; i < v.length; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    v[i] = x >>> 24;
  }
}

describe("cuda_staging chunk plan", () => {
  it("cuts into chunks with the last one short, alternating two slots", () => {
    expect(stagingChunks(0)).toEqual([]);
    expect(stagingChunks(1)).toEqual([{ index: 0, offset: 0, length: 1, slot: 0, reuses: -1 }]);
    expect(stagingChunks(STAGING_CHUNK_BYTES)).toHaveLength(1);
    const c = stagingChunks(3 * STAGING_CHUNK_BYTES - 7);
    expect(c.map((x) => [x.offset, x.length, x.slot, x.reuses])).toEqual([
      [0, 4 * MiB, 0, -1],
      [4 * MiB, 4 * MiB, 1, -1],
      [8 * MiB, 4 * MiB - 7, 0, 0],
    ]);
    expect(stagingChunks(10, 3, 3).map((x) => x.reuses)).toEqual([-1, -1, -1, 0]);
    expect(() => stagingChunks(-1)).toThrow(ValueError);
    expect(() => stagingChunks(10, 0)).toThrow(ValueError);
    expect(() => stagingChunks(10, 4, 0)).toThrow(ValueError);
  });

  it("issues chunk i+1's device-to-host copy before chunk i crosses", () => {
    expect(senderSteps(stagingChunks(4, 1))).toEqual([
      "d2h 0",
      "d2h 1",
      "send 0",
      "d2h 2",
      "send 1",
      "d2h 3",
      "send 2",
      "send 3",
    ]);
  });
});

describe("cuda_staging data path against the stand-in driver", () => {
  it.each([1, 999, 1000, 1001, 4321])("moves %i bytes intact in 1000-byte chunks, in the planned order", async (n) => {
    const { a, b, sa, sb, ta, tb } = pair({ chunkBytes: 1000 });
    const src = a.alloc(n + 64);
    const dst = b.alloc(n + 64);
    fill(a.view(src + 64n, n), n);
    const [tx, rx] = lanePair();
    await Promise.all([sa.send(0, src + 64n, n, tx), sb.recv(0, dst + 64n, n, rx)]);
    expect(Buffer.from(b.view(dst + 64n, n)).equals(Buffer.from(a.view(src + 64n, n)))).toBe(true);
    expect(ta).toEqual(senderSteps(stagingChunks(n, 1000)));
    expect(tb.filter((s) => s.startsWith("recv"))).toHaveLength(Math.ceil(n / 1000));
  });

  it("moves 10 MiB + 123 bytes in 4 MiB chunks and reuses the pinned pool on the next transfer", async () => {
    const { world, a, b, sa, sb } = pair();
    const n = 10 * MiB + 123;
    const src = a.alloc(n);
    const dst = b.alloc(n);
    fill(a.view(src, n), 7);
    for (let round = 0; round < 2; round++) {
      world.log.length = 0;
      const [tx, rx] = lanePair();
      await Promise.all([sa.send(0, src, n, tx), sb.recv(0, dst, n, rx)]);
      expect(Buffer.from(b.view(dst, n)).equals(Buffer.from(a.view(src, n)))).toBe(true);
      const allocs = world.log.filter((l) => l.includes("cuMemHostAlloc"));
      expect(allocs).toEqual(
        round === 0
          ? [
              "A cuMemHostAlloc 4194304",
              "A cuMemHostAlloc 4194304",
              "B cuMemHostAlloc 4194304",
              "B cuMemHostAlloc 4194304",
            ]
          : [],
      );
      expect(world.log.filter((l) => l.includes("cuMemcpyDtoHAsync"))).toEqual([
        "A cuMemcpyDtoHAsync 0+4194304 s20",
        "A cuMemcpyDtoHAsync 4194304+4194304 s20",
        "A cuMemcpyDtoHAsync 8388608+2097275 s20",
      ]);
    }
    expect(sa.pool.allocated).toBe(2);
  });

  it("overlaps, but reuses a slot only after its chunk's copy passed its fence", async () => {
    const { world, a, b, sa, sb, ta, tb } = pair({ chunkBytes: 100 });
    world.autoComplete = false;
    const n = 350;
    const src = a.alloc(n);
    const dst = b.alloc(n);
    fill(a.view(src, n), 3);
    const [tx, rx] = lanePair();
    const done = Promise.all([sa.send(0, src, n, tx), sb.recv(0, dst, n, rx)]);
    await new Promise((r) => setTimeout(r, 20));
    // Nothing completed: both slots copied into, nothing sent (fence of chunk 0 not passed).
    expect(ta).toEqual(["d2h 0", "d2h 1"]);
    expect(tb).toEqual([]);
    const tick = setInterval(() => world.completeAll(), 2);
    try {
      await done;
    } finally {
      clearInterval(tick);
    }
    // Copies happened only at completion, so intact bytes mean every send waited for its fence.
    expect(Buffer.from(b.view(dst, n)).equals(Buffer.from(a.view(src, n)))).toBe(true);
    // The receiver took chunk 1 while chunk 0's host-to-device copy was pending, and chunk 2 only after.
    expect(tb.slice(0, 4)).toEqual(["recv 0", "h2d 0", "recv 1", "h2d 1"]);
  });
});

describe("the cuda_staging channel of a pipe, over the stand-in", () => {
  const dev = (ptr: bigint, byteLength: number): DeviceBuffer => ({
    kind: "cuda",
    deviceIndex: 0,
    memory: { handle: ptr },
    offset: 0,
    byteLength,
  });
  async function channels() {
    const world = new GpuWorld();
    const a = new StandinDriver(world, "A");
    const b = new StandinDriver(world, "B");
    const [ba, bb, closePipe] = bootstrapPair("cuda_staging");
    // the bytes of binary fields the setup messages carry (the pipe's control connection)
    const control = { bytes: 0 };
    const send = ba.send.bind(ba);
    ba.send = (m) => ((control.bytes += binaryBytes(m)), send(m));
    const ctx = (m: StandinDriver) => createCudaStagingContext({ dataPath: true, calls: new StagingStandin(world, m) });
    const [ta, tb] = await Promise.all([ctx(a).createChannel(ba), ctx(b).createChannel(bb)]);
    return { world, a, b, ta, tb, closePipe, control };
  }

  it("moves the chunks on its tcp lanes, from and into the pinned slots: the control connection carries only notices", async () => {
    const { a, b, ta, tb, control } = await channels();
    const n = 9 * MiB + 5;
    const src = a.alloc(n);
    fill(a.view(src, n), 21);
    const dst = b.alloc(n);
    const before = control.bytes;
    const s = ta.send(dev(src, n));
    await Promise.all([s.done, tb.recv(s.descriptor, dev(dst, n))]);
    expect(Buffer.from(b.view(dst, n)).equals(Buffer.from(a.view(src, n)))).toBe(true);
    expect(control.bytes - before, "three 4-byte chunk notices").toBe(12);
  });

  it("carries cuda-cuda, cuda-cpu and cpu-cuda transfers, several at once, intact", async () => {
    const { a, b, ta, tb } = await channels();
    const n = 9 * MiB + 5;
    const src = a.alloc(n);
    fill(a.view(src, n), 11);
    const host = new Uint8Array(3 * MiB + 1);
    fill(host, 12);
    const d1 = b.alloc(n);
    const d2 = b.alloc(host.byteLength);
    const h1 = new Uint8Array(n);
    const sends = [ta.send(dev(src, n)), ta.send(dev(src, n)), ta.send({ kind: "cpu", bytes: host })];
    const intos: ChannelBuffer[] = [dev(d1, n), { kind: "cpu", bytes: h1 }, dev(d2, host.byteLength)];
    await Promise.all([...sends.map((s) => s.done), ...sends.map((s, i) => tb.recv(s.descriptor, intos[i]!))]);
    const want = Buffer.from(a.view(src, n));
    expect(Buffer.from(b.view(d1, n)).equals(want)).toBe(true);
    expect(Buffer.from(h1).equals(want)).toBe(true);
    expect(Buffer.from(b.view(d2, host.byteLength)).equals(Buffer.from(host))).toBe(true);
  });

  it("close fails pending transfers with WorkerUnavailableError", async () => {
    const { world, a, b, ta, tb, closePipe } = await channels();
    world.autoComplete = false;
    const s = ta.send(dev(a.alloc(100), 100));
    const r = tb.recv(s.descriptor, dev(b.alloc(100), 100));
    closePipe();
    await expect(s.done).rejects.toBeInstanceOf(WorkerUnavailableError);
    await expect(r).rejects.toBeInstanceOf(WorkerUnavailableError);
    expect(ta.closed && tb.closed).toBe(true);
  });
});
