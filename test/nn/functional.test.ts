/**
 * nn.functional layers: dropout (seeded masks, scaling, train/eval, errors),
 * layerNorm (values, stability, errors), linear, embedding and
 * scaledDotProductAttention, with float64 numeric gradient checks for
 * layerNorm, linear and attention (functional and module).
 */
import { describe, expect, it } from "vitest";
import {
  autograd,
  IndexError,
  manualSeed,
  nn,
  ones,
  randn,
  ShapeError,
  type Tensor,
  tensor,
  ValueError,
  zeros,
} from "../../sdk/index.js";

const F = nn.functional;
const leaf = (t: Tensor): Tensor => t.requiresGrad_(true);

function expectClose(a: Tensor, b: Tensor, tol = 1e-6): void {
  expect(a.shape).toEqual(b.shape);
  const x = a.toArray();
  const y = b.toArray();
  x.forEach((v, i) => expect(Math.abs(v - y[i]!)).toBeLessThan(tol));
}

describe("dropout", () => {
  it("zeroes about p of the elements and scales the rest by 1/(1-p), reproducibly", () => {
    manualSeed(0);
    const x = ones([100, 50]);
    const y = F.dropout(x, 0.3).toArray();
    const zerosFrac = y.filter((v) => v === 0).length / y.length;
    expect(zerosFrac).toBeGreaterThan(0.27);
    expect(zerosFrac).toBeLessThan(0.33);
    expect(y.every((v) => v === 0 || Math.abs(v - 1 / 0.7) < 1e-6)).toBe(true);
    manualSeed(0);
    expect(F.dropout(x, 0.3).toArray()).toEqual(y);
  });

  it("passes the gradient through the kept elements only", () => {
    manualSeed(1);
    const x = leaf(randn([4, 6]));
    const y = F.dropout(x, 0.5);
    y.sum().backward();
    const g = x.grad!.toArray();
    y.toArray().forEach((v, i) => expect(g[i]).toBe(v === 0 ? 0 : 2));
  });

  it("is the identity when not training or p = 0; p = 1 zeroes; p outside [0, 1] is refused", () => {
    const x = randn([3, 3]);
    expect(F.dropout(x, 0.5, false)).toBe(x);
    expect(F.dropout(x, 0)).toBe(x);
    expect(
      F.dropout(x, 1)
        .toArray()
        .every((v) => v === 0),
    ).toBe(true);
    expect(() => F.dropout(x, 1.5)).toThrow("dropout probability has to be between 0 and 1, but got 1.5");
    expect(() => F.dropout(x, -0.1)).toThrow(ValueError);
    expect(() => new nn.Dropout(2)).toThrow(ValueError);
  });
});

describe("layerNorm", () => {
  it("normalises the trailing dims with the biased variance, then scales and shifts", () => {
    const x = tensor(
      [
        [1, 2, 3, 4],
        [2, 2, 2, 6],
      ],
      { dtype: "float64" },
    );
    const w = tensor([1, 2, 1, 1], { dtype: "float64" });
    const b = tensor([0, 0, 1, 0], { dtype: "float64" });
    const row = (r: number[]): number[] => {
      const m = r.reduce((s, v) => s + v, 0) / r.length;
      const v = r.reduce((s, q) => s + (q - m) ** 2, 0) / r.length;
      return r.map((q) => (q - m) / Math.sqrt(v + 1e-5));
    };
    const want = [row([1, 2, 3, 4]), row([2, 2, 2, 6])].map((r) =>
      r.map((v, i) => v * [1, 2, 1, 1][i]! + [0, 0, 1, 0][i]!),
    );
    expectClose(F.layerNorm(x, [4], w, b), tensor(want, { dtype: "float64" }), 1e-12);
    const ln = new nn.LayerNorm([2, 4], { dtype: "float64" });
    const all = row([1, 2, 3, 4, 2, 2, 2, 6]);
    expectClose(ln.forward(x), tensor([all.slice(0, 4), all.slice(4)], { dtype: "float64" }), 1e-12);
  });

  it("stays accurate when the mean is large against the spread", () => {
    manualSeed(2);
    const base = randn([3, 8], { dtype: "float64" });
    expectClose(F.layerNorm(base.add(1e8), [8]), F.layerNorm(base, [8]), 1e-6);
  });

  it("refuses shapes that don't end in normalizedShape", () => {
    expect(() => F.layerNorm(zeros([2, 3, 5]), [4])).toThrow(
      "Given normalized_shape=[4], expected input with shape [*, 4], but got input of size[2, 3, 5]",
    );
    expect(() => F.layerNorm(zeros([2, 4]), [4], ones([3]))).toThrow(ShapeError);
  });
});

describe("linear and embedding", () => {
  it("linear is x Wᵀ + b for 1-D, 2-D and 3-D inputs", () => {
    const w = tensor(
      [
        [1, 0],
        [0, 2],
        [1, 1],
      ],
      { dtype: "float32" },
    );
    const b = tensor([0, 1, -1], { dtype: "float32" });
    expect(F.linear(tensor([3, 4], { dtype: "float32" }), w, b).toArray()).toEqual([3, 9, 6]);
    const x = tensor([[[3, 4]], [[1, 1]]], { dtype: "float32" });
    expect(F.linear(x, w, b).shape).toEqual([2, 1, 3]);
    expect(F.linear(x, w).toArray()).toEqual([3, 8, 7, 1, 2, 2]);
    expect(() => F.linear(zeros([2, 5]), w)).toThrow(/cannot be multiplied/);
  });

  it("embedding picks rows; the padding row gets no gradient; bad indices are IndexErrors", () => {
    const w = leaf(randn([5, 3]));
    const idx = tensor([
      [0, 2],
      [2, 4],
    ]);
    const e = F.embedding(idx, w, 2);
    expect(e.shape).toEqual([2, 2, 3]);
    expect(e.select(0, 1).select(0, 1).toArray()).toEqual(w.select(0, 4).toArray());
    e.sum().backward();
    expect(w.grad!.toArray()).toEqual([1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1]);
    expect(() => F.embedding(tensor([5]), w)).toThrow(IndexError);
    expect(() => F.embedding(tensor([0]), w, 7)).toThrow(/Padding_idx/);
  });
});

describe("scaledDotProductAttention", () => {
  it("isCausal equals an explicit lower-triangular bool mask and hides the future", () => {
    manualSeed(3);
    const [q, k, v] = [randn([2, 4, 3]), randn([2, 4, 3]), randn([2, 4, 5])] as const;
    const causal = F.scaledDotProductAttention(q, k, v, { isCausal: true });
    const masked = F.scaledDotProductAttention(q, k, v, { attnMask: F.causalMask(4).logicalNot() });
    expectClose(causal, masked, 1e-6);
    // the first query sees only the first key: its output is v[0]
    expectClose(causal.select(1, 0), v.select(1, 0), 1e-6);
    const manual = q.matmul(k.transpose(-2, -1)).div(Math.sqrt(3)).softmax(-1).matmul(v);
    expectClose(F.scaledDotProductAttention(q, k, v), manual, 1e-6);
    const bias = randn([4, 4]);
    expectClose(
      F.scaledDotProductAttention(q, k, v, { attnMask: bias, scale: 0.5 }),
      q.matmul(k.transpose(-2, -1)).mul(0.5).add(bias).softmax(-1).matmul(v),
      1e-6,
    );
    expect(() => F.scaledDotProductAttention(q, k, v, { isCausal: true, attnMask: bias })).toThrow(ValueError);
  });
});

describe("gradients (float64 gradcheck)", () => {
  it("layerNorm w.r.t. input, weight and bias", () => {
    manualSeed(4);
    const x = leaf(randn([2, 3, 4], { dtype: "float64" }));
    const w = leaf(randn([4], { dtype: "float64" }));
    const b = leaf(randn([4], { dtype: "float64" }));
    const r = autograd.gradcheck((a, c, d) => F.layerNorm(a, [4], c, d), [x, w, b]);
    expect(r.ok, r.worst).toBe(true);
    const w2 = leaf(randn([3, 4], { dtype: "float64" }));
    expect(autograd.gradcheck((a, c) => F.layerNorm(a, [3, 4], c, null, 1e-3), [x, w2]).ok).toBe(true);
  });

  it("linear w.r.t. input, weight and bias (2-D and 3-D inputs)", () => {
    manualSeed(5);
    const w = leaf(randn([3, 4], { dtype: "float64" }));
    const b = leaf(randn([3], { dtype: "float64" }));
    for (const shape of [
      [5, 4],
      [2, 3, 4],
    ]) {
      const x = leaf(randn(shape, { dtype: "float64" }));
      const r = autograd.gradcheck((a, c, d) => F.linear(a, c, d), [x, w, b]);
      expect(r.ok, r.worst).toBe(true);
    }
  });

  it("attention w.r.t. q, k and v, and CausalSelfAttention w.r.t. its input", () => {
    manualSeed(6);
    const q = leaf(randn([2, 2, 4, 3], { dtype: "float64" }));
    const k = leaf(randn([2, 2, 4, 3], { dtype: "float64" }));
    const v = leaf(randn([2, 2, 4, 3], { dtype: "float64" }));
    const r = autograd.gradcheck((a, b, c) => F.scaledDotProductAttention(a, b, c, { isCausal: true }), [q, k, v]);
    expect(r.ok, r.worst).toBe(true);
    const attn = new nn.CausalSelfAttention({ nEmbd: 4, nHead: 2, blockSize: 4 }).to("float64");
    const x = leaf(randn([1, 3, 4], { dtype: "float64" }));
    const r2 = autograd.gradcheck((a) => attn.forward(a), [x]);
    expect(r2.ok, r2.worst).toBe(true);
  });
});
