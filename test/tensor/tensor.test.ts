/**
 * The tensor layer: creation, dtypes and promotion, views that share
 * storage, element access, printing, devices, seeded randomness, and the
 * typed errors for bad input. Runs over every backend.
 */
import { expect, it } from "vitest";
import {
  DTypeError,
  DeviceError,
  IndexError,
  ShapeError,
  ValueError,
  add,
  arange,
  cat,
  eye,
  full,
  linspace,
  manualSeed,
  matmul,
  multinomial,
  ones,
  rand,
  randint,
  randn,
  stack,
  tensor,
  where,
  zeros,
} from "../../sdk/index.js";
import { describeEachBackend, expectClose } from "../helpers.js";

describeEachBackend("tensor", () => {
  it("creates from nested arrays with torch's dtype inference", () => {
    expect(
      tensor([
        [1, 2],
        [3, 4],
      ]).dtype,
    ).toBe("int64");
    expect(tensor([1.5, 2]).dtype).toBe("float32");
    expect(tensor([true, false]).dtype).toBe("bool");
    expect(tensor(3.5).shape).toEqual([]);
    expect(
      tensor([
        [1, 2],
        [3, 4],
      ]).shape,
    ).toEqual([2, 2]);
    expect(() => tensor([[1, 2], [3]])).toThrow(ShapeError);
    expect(tensor(new Float64Array([1, 2])).dtype).toBe("float64");
    expect(tensor(new BigInt64Array([5n, -7n])).tolist()).toEqual([5, -7]);
  });

  it("has creation ops matching torch", () => {
    expect(zeros([2, 3]).tolist()).toEqual([
      [0, 0, 0],
      [0, 0, 0],
    ]);
    expect(ones([2]).dtype).toBe("float32");
    expect(full([2], 7).dtype).toBe("int64");
    expect(full([2], 0.5).tolist()).toEqual([0.5, 0.5]);
    expect(arange(5).tolist()).toEqual([0, 1, 2, 3, 4]);
    expect(arange(5).dtype).toBe("int64");
    expectClose(arange(0, 1, 0.25), [0, 0.25, 0.5, 0.75]);
    expectClose(linspace(0, 1, 5), [0, 0.25, 0.5, 0.75, 1]);
    expect(eye(2, 3).tolist()).toEqual([
      [1, 0, 0],
      [0, 1, 0],
    ]);
    expect(() => zeros([-1])).toThrow(ValueError);
  });

  it("stores every dtype, including 16-bit floats and int64 beyond int32", () => {
    const h = tensor([1.5, -2.25, 65504, 1e-3], { dtype: "float16" });
    expectClose(h.float(), [1.5, -2.25, 65504, 0.0010004], 1e-3);
    const b = tensor([1.5, -2.25, 3.14159], { dtype: "bfloat16" });
    expectClose(b.float(), [1.5, -2.25, 3.140625], 0);
    const big = tensor([2 ** 40, -(2 ** 33)], { dtype: "int64" });
    expect(big.add(1).tolist()).toEqual([2 ** 40 + 1, -(2 ** 33) + 1]);
    expect(big.typedArray()).toBeInstanceOf(BigInt64Array);
    expect(tensor([1, 2], { dtype: "uint8" }).typedArray()).toBeInstanceOf(Uint8Array);
    expect(tensor([3.7, -3.7]).to("int32").tolist()).toEqual([3, -3]);
    expect(tensor([0.5, 0]).bool().tolist()).toEqual([true, false]);
  });

  it("promotes dtypes as torch does", () => {
    const i = tensor([1, 2]);
    const f = tensor([0.5, 1]);
    expect(i.add(f).dtype).toBe("float32");
    expect(i.add(1).dtype).toBe("int64");
    expect(i.add(0.5).dtype).toBe("float32");
    expect(i.div(2).dtype).toBe("float32");
    expect(f.add(tensor([1], { dtype: "float64" })).dtype).toBe("float64");
    expect(f.add(tensor(1, { dtype: "float64" })).dtype).toBe("float32"); // 0-dim doesn't promote within a category
    expect(tensor([1], { dtype: "int32" }).add(tensor([1])).dtype).toBe("int64");
    expect(i.gt(1).dtype).toBe("bool");
    expect(tensor([true]).add(tensor([true])).dtype).toBe("bool");
  });

  it("broadcasts, and says which sizes don't match", () => {
    expect(zeros([3, 1]).add(zeros([4])).shape).toEqual([3, 4]);
    expect(() => zeros([3]).add(zeros([4]))).toThrow(ShapeError);
    expect(() => zeros([3]).add(zeros([4]))).toThrow(/size of tensor a \(3\) must match the size of tensor b \(4\)/);
    expect(() => matmul(zeros([2, 3]), zeros([4, 2]))).toThrow(/cannot be multiplied \(2x3 and 4x2\)/);
    expect(() => matmul(zeros([2, 3]), zeros([3, 2], { dtype: "float64" }))).toThrow(DTypeError);
  });

  it("makes views that share storage, without copies", () => {
    const x = arange(12).reshape(3, 4);
    const t = x.t();
    expect(t.storage).toBe(x.storage);
    expect(t.isContiguous()).toBe(false);
    expect(t.contiguous().storage).not.toBe(x.storage);
    expect(x.narrow(1, 1, 2).tolist()).toEqual([
      [1, 2],
      [5, 6],
      [9, 10],
    ]);
    expect(x.select(0, 2).tolist()).toEqual([8, 9, 10, 11]);
    expect(x.slice(1, 0, 4, 2).tolist()).toEqual([
      [0, 2],
      [4, 6],
      [8, 10],
    ]);
    expect(x.unsqueeze(0).shape).toEqual([1, 3, 4]);
    expect(x.unsqueeze(-1).squeeze().shape).toEqual([3, 4]);
    expect(x.permute(1, 0).tolist()).toEqual(t.tolist());
    const e = tensor([1, 2]).expand(3, 2);
    expect(e.stride()).toEqual([0, 1]);
    expect(e.tolist()).toEqual([
      [1, 2],
      [1, 2],
      [1, 2],
    ]);
    expect(() => t.view(12)).toThrow(/view size is not compatible/);
    expect(t.reshape(12).tolist()).toEqual([0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]);
    x.narrow(0, 0, 1).fill_(-1);
    expect(x.select(0, 0).tolist()).toEqual([-1, -1, -1, -1]);
  });

  it("concatenates, stacks, splits and chunks", () => {
    const a = arange(6).reshape(2, 3);
    expect(cat([a, a], 0).shape).toEqual([4, 3]);
    expect(cat([a, a.mul(10)], 1).tolist()).toEqual([
      [0, 1, 2, 0, 10, 20],
      [3, 4, 5, 30, 40, 50],
    ]);
    expect(stack([a, a], 2).shape).toEqual([2, 3, 2]);
    expect(a.split(2, 1).map((s) => s.shape)).toEqual([
      [2, 2],
      [2, 1],
    ]);
    expect(
      arange(5)
        .chunk(2)
        .map((s) => s.tolist()),
    ).toEqual([
      [0, 1, 2],
      [3, 4],
    ]);
    expect(() => cat([a, zeros([2, 2])], 0)).toThrow(/Sizes of tensors must match except in dimension 0/);
    expect(() => stack([a, zeros([3, 2])])).toThrow(ShapeError);
  });

  it("reduces over dims with keepdim, as torch", () => {
    const x = tensor(
      [
        [1, 5, 3],
        [4, 2, 6],
      ],
      { dtype: "float32" },
    );
    expect(x.sum().item()).toBe(21);
    expect(x.sum(0).tolist()).toEqual([5, 7, 9]);
    expect(x.sum(1, true).shape).toEqual([2, 1]);
    expect(x.mean([0, 1]).item()).toBe(3.5);
    expect(x.max().item()).toBe(6);
    const m = x.max(1);
    expect(m.values.tolist()).toEqual([5, 6]);
    expect(m.indices.tolist()).toEqual([1, 2]);
    expect(m.indices.dtype).toBe("int64");
    expect(x.argmax().item()).toBe(5);
    expect(x.argmax(0, true).tolist()).toEqual([[1, 0, 1]]);
    expectClose(x.logsumexp(1), [
      Math.log(Math.exp(1) + Math.exp(5) + Math.exp(3)),
      Math.log(Math.exp(4) + Math.exp(2) + Math.exp(6)),
    ]);
    expect(tensor([1, 2, 3]).sum().dtype).toBe("int64");
    expect(() => tensor([1, 2]).mean()).toThrow(/floating point/);
    expect(() => x.sum(2)).toThrow(IndexError);
  });

  it("indexes with indexSelect, gather, scatterAdd, maskedFill and where", () => {
    const x = arange(6, undefined, 1, { dtype: "float32" }).reshape(2, 3);
    const idx = tensor([2, 0]);
    expect(x.indexSelect(1, idx).tolist()).toEqual([
      [2, 0],
      [5, 3],
    ]);
    expect(
      x
        .gather(
          1,
          tensor([
            [0, 0],
            [2, 1],
          ]),
        )
        .tolist(),
    ).toEqual([
      [0, 0],
      [5, 4],
    ]);
    expect(
      zeros([2, 3])
        .scatterAdd(1, tensor([[0, 0, 2]]), ones([1, 3]))
        .tolist(),
    ).toEqual([
      [2, 0, 1],
      [0, 0, 0],
    ]);
    expect(x.maskedFill(x.gt(2), -1).tolist()).toEqual([
      [0, 1, 2],
      [-1, -1, -1],
    ]);
    expect(where(x.lt(3), x, zeros([1])).tolist()).toEqual([
      [0, 1, 2],
      [0, 0, 0],
    ]);
    expect(() => x.indexSelect(1, tensor([3]))).toThrow(/out of bounds/);
    expect(() => x.indexSelect(1, tensor([1.0, 2.5]))).toThrow(DTypeError);
    expect(() => x.maskedFill(tensor([1, 0, 1]), 0)).toThrow(DTypeError);
  });

  it("matmul follows torch's rank rules", () => {
    const a = arange(6, undefined, 1, { dtype: "float32" }).reshape(2, 3);
    const b = arange(3, undefined, 1, { dtype: "float32" });
    expect(a.matmul(b).tolist()).toEqual([5, 14]);
    expect(b.matmul(b).item()).toBe(5);
    expect(a.matmul(a.t()).tolist()).toEqual([
      [5, 14],
      [14, 50],
    ]);
    expect(zeros([4, 1, 2, 3]).matmul(zeros([5, 3, 7])).shape).toEqual([4, 5, 2, 7]);
    expect(() => zeros([2, 3]).bmm(zeros([2, 3, 2]))).toThrow(ShapeError);
  });

  it("softmax rows sum to one and logSoftmax is stable for large inputs", () => {
    const x = tensor([
      [1000, 1001, 1002],
      [-5, 0, 5],
    ]);
    expectClose(x.softmax(1).sum(1), [1, 1]);
    const ls = x.logSoftmax(1).toArray();
    expect(ls.every(Number.isFinite)).toBe(true);
    expectClose(ls.slice(0, 3), [-2.4076, -1.4076, -0.4076], 1e-4);
  });

  it("gives item(), tolist() and a typed-array view", () => {
    expect(tensor([[2.5]]).item()).toBe(2.5);
    expect(() => tensor([1, 2]).item()).toThrow(/cannot be converted to a scalar/);
    const x = arange(6, undefined, 1, { dtype: "float32" }).reshape(2, 3);
    const view = x.typedArray() as Float32Array;
    view[0] = 42;
    expect(x.tolist()).toEqual([
      [42, 1, 2],
      [3, 4, 5],
    ]);
    expect(() => x.t().typedArray()).toThrow(/contiguous/);
  });

  it("prints like PyTorch", () => {
    expect(
      String(
        tensor([
          [1, 2],
          [3, 4],
        ]),
      ),
    ).toBe("tensor([[1, 2],\n        [3, 4]])");
    expect(String(tensor([1.5, -2]))).toBe("tensor([ 1.5000, -2.0000])");
    expect(String(tensor([1, 2], { dtype: "float32" }))).toBe("tensor([1., 2.])");
    expect(String(tensor([1.5], { dtype: "float64" }))).toBe("tensor([1.5000], dtype=float64)");
    expect(String(tensor([true, false]))).toBe("tensor([ True, False])");
    expect(String(tensor([0.5], { requiresGrad: true }))).toBe("tensor([0.5000], requiresGrad=true)");
    expect(String(tensor([0.5], { requiresGrad: true }).mul(2))).toBe("tensor([1.], gradFn=<MulBackward0>)");
    expect(String(arange(2000))).toContain("...");
  });

  it("refuses CUDA devices until the GPU backend exists", () => {
    expect(() => zeros([2], { device: "cuda:0" })).toThrow(DeviceError);
    expect(() => zeros([2]).cuda()).toThrow(/not available/);
    expect(() => zeros([2], { device: "tpu" })).toThrow(DeviceError);
    expect(zeros([2]).to("cpu").device.toString()).toBe("cpu");
  });

  it("is deterministic under manualSeed", () => {
    manualSeed(7);
    const a = randn([4]).toArray();
    const r = rand([3]).toArray();
    manualSeed(7);
    expect(randn([4]).toArray()).toEqual(a);
    expect(rand([3]).toArray()).toEqual(r);
    expect(r.every((v) => v >= 0 && v < 1)).toBe(true);
    const ints = randint(2, 5, [100]).toArray();
    expect(Math.min(...ints)).toBe(2);
    expect(Math.max(...ints)).toBe(4);
  });

  it("samples randn with unit moments and multinomial by weight", () => {
    manualSeed(0);
    const x = randn([20000]);
    expect(Math.abs(x.mean().item())).toBeLessThan(0.03);
    expect(Math.abs(x.std().item() - 1)).toBeLessThan(0.03);
    const s = multinomial(tensor([0, 1, 3]), 4000, true).toArray();
    expect(s.includes(0)).toBe(false);
    const threes = s.filter((v) => v === 2).length / s.length;
    expect(Math.abs(threes - 0.75)).toBeLessThan(0.03);
    expect(
      multinomial(tensor([1, 1, 1]), 3)
        .toArray()
        .sort(),
    ).toEqual([0, 1, 2]);
    expect(() => multinomial(tensor([1, 1]), 3)).toThrow(ValueError);
  });

  it("refuses a missing or non-numeric operand instead of computing NaN (PyTorch's TypeError)", () => {
    const x = tensor([1, 2]);
    const addAny = add as unknown as (...a: unknown[]) => unknown;
    expect(() => addAny()).toThrow(ValueError);
    expect(() => addAny(x)).toThrow(/expected a Tensor or a number as operand, got undefined/);
    expect(() => addAny(x, "1")).toThrow(ValueError);
    expect(add(x, 1).toArray()).toEqual([2, 3]);
  });
});
