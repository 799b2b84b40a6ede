/**
 * Losses against hand-computed values with torch 1.13's semantics:
 * crossEntropy (ignoreIndex, all ignored -> NaN, class weights, label
 * smoothing, probability targets, K-dim inputs), nllLoss, mseLoss,
 * binaryCrossEntropyWithLogits, their error messages, and numeric gradient
 * checks with respect to the input.
 */
import { describe, expect, it } from "vitest";
import {
  autograd,
  DTypeError,
  IndexError,
  manualSeed,
  nn,
  randn,
  ShapeError,
  type Tensor,
  tensor,
  ValueError,
} from "../../sdk/index.js";

const F = nn.functional;
const X = [
  [1, 2, 3],
  [1, 0, -1],
  [0.5, -2, 0.25],
];

/** -log softmax(row)[t] */
function nll(row: number[], t: number): number {
  const m = Math.max(...row);
  const lse = m + Math.log(row.reduce((s, v) => s + Math.exp(v - m), 0));
  return lse - row[t]!;
}
function logSoftmaxRow(row: number[]): number[] {
  return row.map((_, c) => -nll(row, c));
}

const close = (t: Tensor, want: number[] | number, digits = 5): void => {
  const got = t.toArray();
  const w = typeof want === "number" ? [want] : want;
  expect(got).toHaveLength(w.length);
  got.forEach((v, i) => expect(v).toBeCloseTo(w[i]!, digits));
};

describe("crossEntropy values", () => {
  const x = tensor(X, { dtype: "float64" });
  const l = X.map((r, i) => nll(r, [2, 0, 1][i]!));

  it("mean, sum and none over class indices", () => {
    const t = tensor([2, 0, 1]);
    close(F.crossEntropy(x, t), (l[0]! + l[1]! + l[2]!) / 3);
    close(F.crossEntropy(x, t, { reduction: "sum" }), l[0]! + l[1]! + l[2]!);
    close(F.crossEntropy(x, t, { reduction: "none" }), l);
    expect(F.crossEntropy(x, t).shape).toEqual([]);
  });

  it("ignoreIndex: ignored targets add no loss and leave the mean's denominator", () => {
    const t = tensor([2, -100, 1]);
    close(F.crossEntropy(x, t), (l[0]! + l[2]!) / 2);
    close(F.crossEntropy(x, t, { reduction: "none" }), [l[0]!, 0, l[2]!]);
    close(F.crossEntropy(x, tensor([2, 0, 1]), { ignoreIndex: 0 }), (l[0]! + l[2]!) / 2);
  });

  it("every target ignored: mean is NaN (as torch 1.13), sum is 0", () => {
    const t = tensor([-100, -100, -100]);
    expect(Number.isNaN(F.crossEntropy(x, t).item())).toBe(true);
    expect(F.crossEntropy(x, t, { reduction: "sum" }).item()).toBe(0);
    expect(F.crossEntropy(x, t, { reduction: "none" }).toArray()).toEqual([0, 0, 0]);
  });

  it("class weights give the weighted mean sum(w[t] l) / sum(w[t])", () => {
    const w = [0.2, 1.5, 3];
    const weight = tensor(w, { dtype: "float64" });
    const t = tensor([2, 0, 1]);
    const wt = [w[2]!, w[0]!, w[1]!];
    const num = wt.reduce((s, wi, i) => s + wi * l[i]!, 0);
    close(F.crossEntropy(x, t, { weight }), num / (wt[0]! + wt[1]! + wt[2]!));
    close(
      F.crossEntropy(x, t, { weight, reduction: "none" }),
      wt.map((wi, i) => wi * l[i]!),
    );
  });

  it("label smoothing: (1 - s) nll + s / C * sum_c -logp_c, ignored rows excluded", () => {
    const s = 0.2;
    const t = tensor([2, -100, 1]);
    const smooth = X.map((r) => -logSoftmaxRow(r).reduce((a, b) => a + b, 0));
    const want = (1 - s) * ((l[0]! + l[2]!) / 2) + (s / 3) * ((smooth[0]! + smooth[2]!) / 2);
    close(F.crossEntropy(x, t, { labelSmoothing: s }), want);
    close(F.crossEntropy(x, t, { labelSmoothing: s, reduction: "none" }), [
      (1 - s) * l[0]! + (s / 3) * smooth[0]!,
      0,
      (1 - s) * l[2]! + (s / 3) * smooth[2]!,
    ]);
  });

  it("probability targets: one-hot rows give the index loss, smoothing agrees with index targets", () => {
    const onehot = tensor(
      [
        [0, 0, 1],
        [1, 0, 0],
        [0, 1, 0],
      ],
      { dtype: "float64" },
    );
    const t = tensor([2, 0, 1]);
    close(F.crossEntropy(x, onehot), F.crossEntropy(x, t).item());
    close(F.crossEntropy(x, onehot, { labelSmoothing: 0.3 }), F.crossEntropy(x, t, { labelSmoothing: 0.3 }).item());
    close(F.crossEntropy(x, onehot, { reduction: "none" }), l);
    const weight = tensor([1, 2, 3], { dtype: "float64" });
    // torch: with probabilities the weighted mean divides by the number of rows, not by the weights
    close(F.crossEntropy(x, onehot, { weight }), (3 * l[0]! + 1 * l[1]! + 2 * l[2]!) / 3);
  });

  it("K-dim input [N, C, d] equals the flattened [N*d, C] case; 1-D input takes a 0-dim target", () => {
    manualSeed(0);
    const x3 = randn([2, 4, 3], { dtype: "float64" });
    const t3 = tensor([
      [0, 3, 1],
      [2, 2, -100],
    ]);
    const flat = x3.permute(0, 2, 1).reshape(-1, 4);
    close(F.crossEntropy(x3, t3), F.crossEntropy(flat, t3.reshape(-1)).item(), 10);
    expect(F.crossEntropy(x3, t3, { reduction: "none" }).shape).toEqual([2, 3]);
    close(F.crossEntropy(x.select(0, 0), tensor(2)), l[0]!);
  });

  it("the module form holds its options and its weight as a buffer", () => {
    const weight = tensor([1, 2, 3], { dtype: "float64" });
    const lossFn = new nn.CrossEntropyLoss({ weight, ignoreIndex: 1, labelSmoothing: 0.1 });
    expect(Object.keys(lossFn.stateDict())).toEqual(["weight"]);
    const t = tensor([2, 0, 1]);
    close(lossFn.forward(x, t), F.crossEntropy(x, t, { weight, ignoreIndex: 1, labelSmoothing: 0.1 }).item());
    expect(Object.keys(new nn.CrossEntropyLoss().stateDict())).toEqual([]);
  });
});

describe("crossEntropy errors", () => {
  const x = tensor(X);
  it("batch size mismatch", () => {
    expect(() => F.crossEntropy(x, tensor([0, 1]))).toThrow(ShapeError);
    expect(() => F.crossEntropy(x, tensor([0, 1]))).toThrow(
      "Expected input batch_size (3) to match target batch_size (2).",
    );
  });
  it("multi-target and K-dim shape mismatches", () => {
    expect(() => F.crossEntropy(randn([3, 5]), tensor([[0], [1], [2]]))).toThrow("multi-target not supported");
    expect(() =>
      F.crossEntropy(
        randn([2, 5, 3]),
        tensor([
          [0, 1, 2, 3],
          [0, 1, 2, 3],
        ]),
      ),
    ).toThrow("Expected target size [2, 3], got [2, 4]");
    expect(() => F.crossEntropy(randn([5]), tensor([1]))).toThrow(ShapeError);
  });
  it("targets out of range are IndexErrors (ignored ones may be anything)", () => {
    expect(() => F.crossEntropy(x, tensor([0, 3, 1]))).toThrow(IndexError);
    expect(() => F.crossEntropy(x, tensor([0, 3, 1]))).toThrow("Target 3 is out of bounds.");
    expect(() => F.crossEntropy(x, tensor([0, -1, 1]))).toThrow(IndexError);
    expect(() => F.crossEntropy(x, tensor([0, -1, 1]), { ignoreIndex: -1 })).not.toThrow();
  });
  it("bad dtypes, weights and options", () => {
    expect(() => F.crossEntropy(x, tensor([0.5, 1, 2]))).toThrow(DTypeError);
    expect(() => F.crossEntropy(tensor([[1, 2]]), tensor([0]))).toThrow(DTypeError);
    expect(() => F.crossEntropy(x, tensor([0, 1, 2]), { weight: tensor([1, 1]) })).toThrow(
      "weight tensor should be defined either for all 3 classes or no classes but got weight tensor of shape: [2]",
    );
    expect(() => F.crossEntropy(x, tensor([0, 1, 2]), { labelSmoothing: 1.5 })).toThrow(ValueError);
    expect(() => F.crossEntropy(x, tensor([0, 1, 2]), { reduction: "avg" as "mean" })).toThrow(ValueError);
    expect(() => F.crossEntropy(x, x.softmax(1), { ignoreIndex: 0 })).toThrow("ignore_index is not supported");
  });
});

describe("other losses", () => {
  it("nllLoss on log-probabilities equals crossEntropy on logits", () => {
    const x = tensor(X, { dtype: "float64" });
    const t = tensor([1, 2, -100]);
    const w = tensor([1, 2, 0.5], { dtype: "float64" });
    close(F.nllLoss(x.logSoftmax(1), t, { weight: w }), F.crossEntropy(x, t, { weight: w }).item());
    close(
      new nn.NLLLoss({ reduction: "sum" }).forward(x.logSoftmax(1), t),
      F.crossEntropy(x, t, { reduction: "sum" }).item(),
    );
  });

  it("mseLoss reductions, and broadcasting like PyTorch", () => {
    const a = tensor([
      [1, 2],
      [3, 4],
    ]);
    const b = tensor([
      [1, 0],
      [0, 4],
    ]);
    close(F.mseLoss(a.float(), b.float()), (4 + 9) / 4);
    close(new nn.MSELoss({ reduction: "sum" }).forward(a.float(), b.float()), 13);
    close(F.mseLoss(a.float(), b.float(), { reduction: "none" }), [0, 4, 9, 0]);
    close(F.mseLoss(a.float(), tensor([1, 2], { dtype: "float32" }), { reduction: "sum" }), 0 + 0 + 4 + 4);
  });

  it("binaryCrossEntropyWithLogits is stable for large logits and matches the definition", () => {
    const x = tensor([-200, -1, 0, 2, 200], { dtype: "float64" });
    const t = tensor([0, 1, 0.5, 0, 1], { dtype: "float64" });
    const sig = (v: number) => 1 / (1 + Math.exp(-v));
    const def = (v: number, y: number) => -(y * Math.log(sig(v)) + (1 - y) * Math.log(1 - sig(v)));
    close(F.binaryCrossEntropyWithLogits(x, t, { reduction: "none" }), [0, def(-1, 1), def(0, 0.5), def(2, 0), 0]);
    const pw = tensor([3], { dtype: "float64" });
    const got = new nn.BCEWithLogitsLoss({ posWeight: pw, reduction: "none" }).forward(x, t).toArray();
    expect(got[1]).toBeCloseTo(-3 * Math.log(sig(-1)), 10);
    expect(() => F.binaryCrossEntropyWithLogits(x, t.reshape(5, 1))).toThrow(ShapeError);
  });
});

describe("loss gradients (float64 gradcheck)", () => {
  const leaf = (t: Tensor): Tensor => t.requiresGrad_(true);

  it("crossEntropy w.r.t. the input: weights, ignoreIndex, smoothing, K-dim, probabilities", () => {
    manualSeed(11);
    const x = leaf(randn([4, 5], { dtype: "float64" }));
    const t = tensor([1, -100, 4, 0]);
    const weight = tensor([0.5, 1, 2, 1, 3], { dtype: "float64" });
    for (const reduction of ["mean", "sum", "none"] as const) {
      const r = autograd.gradcheck((a) => F.crossEntropy(a, t, { weight, labelSmoothing: 0.1, reduction }), [x]);
      expect(r.ok, `${reduction}: ${r.worst}`).toBe(true);
    }
    const x3 = leaf(randn([2, 3, 4], { dtype: "float64" }));
    const t3 = tensor([
      [0, 1, 2, 1],
      [2, 2, 0, -100],
    ]);
    expect(autograd.gradcheck((a) => F.crossEntropy(a, t3), [x3]).ok).toBe(true);
    const p = randn([4, 5], { dtype: "float64" }).softmax(1);
    expect(autograd.gradcheck((a) => F.crossEntropy(a, p, { weight, labelSmoothing: 0.2 }), [x]).ok).toBe(true);
  });

  it("mseLoss, nllLoss and binaryCrossEntropyWithLogits", () => {
    manualSeed(12);
    const a = leaf(randn([3, 4], { dtype: "float64" }));
    const b = leaf(randn([3, 4], { dtype: "float64" }));
    expect(autograd.gradcheck((u, v) => F.mseLoss(u, v), [a, b]).ok).toBe(true);
    expect(autograd.gradcheck((u) => F.nllLoss(u.logSoftmax(1), tensor([3, 0, 2])), [a]).ok).toBe(true);
    const y = randn([3, 4], { dtype: "float64" }).sigmoid();
    const pw = tensor([1, 2, 3, 0.5], { dtype: "float64" });
    expect(autograd.gradcheck((u) => F.binaryCrossEntropyWithLogits(u, y, { posWeight: pw }), [a]).ok).toBe(true);
  });
});
