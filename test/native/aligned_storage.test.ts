/**
 * Large host storages start on a 64-byte line when the addon is loaded (sdk/tensor/dtype.ts
 * alignedArrayOver): zeroed ones, kernel outputs and buffers recycled through the output pool
 * (sdk/tensor/pool.ts), for every dtype; small ones and the alignment-off setting keep their
 * buffers' first byte.
 */
import { afterEach, describe, expect, it } from "vitest";
import { type DType, randn, tensor, zeros } from "../../sdk/index.js";
import { hostAlignPad, itemSize, setBufferAddressProvider } from "../../sdk/tensor/dtype.js";
import { POOL_MIN_BYTES, poolStats } from "../../sdk/tensor/pool.js";
import { Storage } from "../../sdk/tensor/storage.js";
import { nativeOrSkip } from "./helpers.js";

const { native, skip } = nativeOrSkip();

describe.skipIf(skip !== null)("64-byte aligned host storages", () => {
  const n = native!;
  const line = (s: Storage) => n.addressOf(s.data) % 64;

  afterEach(() => setBufferAddressProvider((b) => n.addressOf(b)));

  it("zeroed and uninitialized large storages of every dtype start on a line and cover what was asked", () => {
    expect(hostAlignPad()).toBe(64);
    for (const dtype of ["float32", "float64", "int32", "int64", "uint8", "bool", "float16"] as DType[]) {
      for (const numel of [POOL_MIN_BYTES / itemSize(dtype), 70_001, 300_000]) {
        for (const s of [Storage.alloc(dtype, numel), Storage.allocUninit(dtype, numel)]) {
          expect(line(s), `${dtype} x ${numel}`).toBe(0);
          expect(s.data.length).toBe(numel);
          expect(s.data.byteOffset + s.data.byteLength).toBeLessThanOrEqual(s.data.buffer.byteLength);
        }
        const z = Storage.alloc(dtype, numel).data;
        expect(Array.prototype.every.call(z, (v: number | bigint) => v === 0 || v === 0n)).toBe(true);
      }
    }
  });

  it("ops' outputs are aligned and right; a recycled buffer comes back aligned and zeroed when asked", () => {
    const a = randn([300, 128]);
    const b = randn([300, 128]);
    const c = a.add(b);
    expect(line(c.storage)).toBe(0);
    const [av, bv, cv] = [a.toArray(), b.toArray(), c.toArray()] as number[][];
    expect(cv.every((x, i) => x === Math.fround(av[i]! + bv[i]!))).toBe(true);

    const bytes = 300 * 128 * 4;
    const s = Storage.allocUninit("float32", 300 * 128);
    (s.data as Float32Array).fill(7);
    s.release();
    const before = poolStats().reuses;
    const again = Storage.alloc("float32", 300 * 128);
    expect(poolStats().reuses).toBe(before + 1);
    expect(again.data.buffer.byteLength).toBe(bytes + 64);
    expect(line(again)).toBe(0);
    expect((again.data as Float32Array).every((x) => x === 0)).toBe(true);
  });

  it("small storages keep their buffer's first byte; with alignment off nothing is padded", () => {
    const small = zeros([100]);
    expect(small.storage.data.byteOffset).toBe(0);
    setBufferAddressProvider(null);
    expect(hostAlignPad()).toBe(0);
    for (const s of [Storage.alloc("float32", 70_001), Storage.allocUninit("float64", 70_001)]) {
      expect(s.data.byteOffset).toBe(0);
      expect(s.data.buffer.byteLength).toBe(s.data.byteLength);
    }
    // still computes
    const x = tensor(Array.from({ length: 70_001 }, (_, i) => i % 7));
    expect(x.mul(2).sum().item()).toBe(2 * x.sum().item());
  });
});
