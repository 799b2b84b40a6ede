/**
 * Finite-difference gradient checks (float64) for every differentiable op,
 * run over each backend. Inputs are seeded and kept away from kinks (relu,
 * abs, clamp bounds, max ties) where the derivative is not defined.
 */
import { expect, it } from "vitest";
import {
  type Tensor,
  autograd,
  cat,
  embedding,
  gelu,
  manualSeed,
  nn,
  randn,
  stack,
  tensor,
  where,
} from "../../sdk/index.js";
import { maskedSoftmax } from "../../sdk/autograd/ops/indexing.js";
import { describeEachBackend } from "../helpers.js";

const f64 = (shape: number[], opts: { positive?: boolean; awayFromZero?: boolean } = {}): Tensor => {
  let t = randn(shape, { dtype: "float64" });
  if (opts.positive) t = t.abs().add(0.5);
  else if (opts.awayFromZero) t = t.add(t.sign().mul(0.2));
  return t.detach().requiresGrad_(true);
};

type Case = [name: string, make: () => Tensor[], fn: (...xs: Tensor[]) => Tensor];

const idx = (vals: number[], shape?: number[]) => {
  const t = tensor(vals, { dtype: "int64" });
  return shape ? t.reshape(shape) : t;
};

const cases: Case[] = [
  // fan-in: a node's gradient summed from contributions that are passed through (add gives the same
  // tensor to both inputs), shared with another consumer, or views (the engine adds in place into a
  // contribution only it holds, sdk/autograd/engine.ts sumInto)
  [
    "fan-in of passed-through, shared and viewed gradients",
    () => [f64([3, 4]), f64([3, 4])],
    (a, b) => {
      const h = a.mul(1.5);
      const p = h.add(h);
      const q = p.add(h.mul(b)).add(b);
      const r = q.reshape([4, 3]).t().add(h).mul(p);
      return r.add(q.mul(q)).add(h.exp());
    },
  ],
  [
    "fan-in where one consumer of a shared gradient has run before the sum",
    () => [f64([2, 6])],
    (a) => {
      const h = a.sin();
      const s = h.add(a); // AddBackward hands one tensor to h's node and to a's accumulator
      const t = s.mul(2).add(h.reshape([3, 4]).reshape([2, 6]));
      return t.mul(s);
    },
  ],
  ["add (broadcast)", () => [f64([3, 4]), f64([4])], (a, b) => a.add(b)],
  ["add alpha", () => [f64([2, 3]), f64([2, 1])], (a, b) => a.add(b, 2.5)],
  ["sub (broadcast)", () => [f64([2, 1, 3]), f64([4, 3])], (a, b) => a.sub(b)],
  ["mul (broadcast)", () => [f64([3, 1]), f64([1, 4])], (a, b) => a.mul(b)],
  ["mul scalar", () => [f64([5])], (a) => a.mul(-3)],
  ["div", () => [f64([3, 4]), f64([3, 4], { positive: true })], (a, b) => a.div(b)],
  ["div scalar numerator", () => [f64([4], { positive: true })], (a) => tensor(2, { dtype: "float64" }).div(a)],
  ["pow tensor^tensor", () => [f64([3, 2], { positive: true }), f64([3, 2])], (a, b) => a.pow(b)],
  ["pow tensor^scalar", () => [f64([4], { positive: true })], (a) => a.pow(2.5)],
  ["neg", () => [f64([3])], (a) => a.neg()],
  ["exp", () => [f64([2, 3])], (a) => a.exp()],
  ["log", () => [f64([2, 3], { positive: true })], (a) => a.log()],
  ["log1p", () => [f64([4], { positive: true })], (a) => a.log1p()],
  ["expm1", () => [f64([4])], (a) => a.expm1()],
  ["sqrt", () => [f64([2, 3], { positive: true })], (a) => a.sqrt()],
  ["rsqrt", () => [f64([5], { positive: true })], (a) => a.rsqrt()],
  ["abs", () => [f64([6], { awayFromZero: true })], (a) => a.abs()],
  ["square", () => [f64([6])], (a) => a.square()],
  ["reciprocal", () => [f64([5], { positive: true })], (a) => a.reciprocal()],
  ["tanh", () => [f64([2, 3])], (a) => a.tanh()],
  ["sigmoid", () => [f64([2, 3])], (a) => a.sigmoid()],
  ["relu", () => [f64([8], { awayFromZero: true })], (a) => a.relu()],
  ["gelu", () => [f64([8])], (a) => gelu(a)],
  ["gelu tanh", () => [f64([8])], (a) => gelu(a, { approximate: "tanh" })],
  ["erf", () => [f64([8])], (a) => a.erf()],
  ["sin / cos", () => [f64([5])], (a) => a.sin().add(a.cos())],
  [
    "clamp",
    () => [tensor([-2.1, -0.5, 0.3, 0.9, 1.7], { dtype: "float64", requiresGrad: true })],
    (a) => a.clamp(-1, 1),
  ],
  ["maximum / minimum", () => [f64([3, 4]), f64([4])], (a, b) => a.maximum(b).add(a.minimum(b).mul(2))],
  ["where", () => [f64([3, 4]), f64([3, 4])], (a, b) => where(a.gt(0), a, b.mul(3))],
  ["maskedFill", () => [f64([3, 4])], (a) => a.maskedFill(tensor([true, false, true, false]), -1)],
  ["sum all", () => [f64([3, 4])], (a) => a.sum()],
  ["sum dims keepdim", () => [f64([2, 3, 4])], (a) => a.sum([0, 2], true)],
  ["mean dim", () => [f64([2, 3, 4])], (a) => a.mean(1)],
  ["var / std", () => [f64([3, 5])], (a) => a.var(1).add(a.std(0).sum())],
  ["max all", () => [f64([3, 4])], (a) => a.max()],
  ["max dim", () => [f64([3, 4])], (a) => a.max(1).values],
  ["min dim keepdim", () => [f64([3, 4])], (a) => a.min(0, true).values],
  ["amax", () => [f64([3, 4])], (a) => a.amax(1)],
  ["logsumexp", () => [f64([3, 4])], (a) => a.logsumexp(1)],
  ["prod dim", () => [f64([3, 4])], (a) => a.prod(1)],
  [
    "prod all with a zero",
    () => [tensor([1.5, 0, -2, 0.7], { dtype: "float64", requiresGrad: true })],
    (a) => a.prod(),
  ],
  ["matmul 2d", () => [f64([3, 4]), f64([4, 2])], (a, b) => a.matmul(b)],
  ["matmul 1d·1d", () => [f64([4]), f64([4])], (a, b) => a.matmul(b)],
  ["matmul 2d·1d", () => [f64([3, 4]), f64([4])], (a, b) => a.matmul(b)],
  ["matmul 1d·3d", () => [f64([4]), f64([2, 4, 3])], (a, b) => a.matmul(b)],
  ["matmul batch broadcast", () => [f64([2, 1, 3, 4]), f64([5, 4, 2])], (a, b) => a.matmul(b)],
  ["matmul transposed input", () => [f64([4, 3]), f64([4, 2])], (a, b) => a.t().matmul(b)],
  ["bmm", () => [f64([2, 3, 4]), f64([2, 4, 2])], (a, b) => a.bmm(b)],
  // the fused rules: one-node linear (bias inside the GEMM), layerNorm's and (log-)softmax's kernels
  [
    "linear 3-D input with bias",
    () => [f64([2, 3, 4]), f64([5, 4]), f64([5])],
    (x, w, b) => nn.functional.linear(x, w, b),
  ],
  ["linear without bias", () => [f64([3, 4]), f64([2, 4])], (x, w) => nn.functional.linear(x, w)],
  [
    "layerNorm with weight and bias",
    () => [f64([3, 5]), f64([5]), f64([5])],
    (x, w, b) => nn.functional.layerNorm(x, [5], w, b).mul(tensor([1, -2, 3, 0.5, 2], { dtype: "float64" })),
  ],
  ["layerNorm without affine", () => [f64([2, 2, 4])], (x) => nn.functional.layerNorm(x, [4]).exp()],
  [
    "maskedSoftmax (attention's fused weights)",
    () => [f64([2, 3, 4])],
    (a) =>
      maskedSoftmax(
        a,
        tensor([
          [0, 1, 1, 1],
          [0, 0, 1, 1],
          [0, 0, 0, 0],
        ]).bool(),
        1.7,
      ).mul(tensor([0.3, -1.2, 2, 0.7, 1.1, -0.4, 0.9, 1.6, -2, 0.5, 1.3, -0.8], { dtype: "float64" }).reshape([3, 4])),
  ],
  ["softmax", () => [f64([3, 4])], (a) => a.softmax(1)],
  ["softmax dim 0", () => [f64([3, 4])], (a) => a.softmax(0)],
  ["logSoftmax", () => [f64([2, 3, 4])], (a) => a.logSoftmax(-1)],
  ["indexSelect", () => [f64([4, 3])], (a) => a.indexSelect(0, idx([2, 0, 2]))],
  ["indexSelect dim 1", () => [f64([2, 4])], (a) => a.indexSelect(1, idx([3, 3, 1]))],
  ["gather", () => [f64([3, 4])], (a) => a.gather(1, idx([0, 3, 1, 1, 2, 2], [3, 2]))],
  ["scatterAdd", () => [f64([3, 4]), f64([2, 4])], (a, s) => a.scatterAdd(0, idx([0, 2, 1, 0, 2, 2, 0, 1], [2, 4]), s)],
  ["embedding", () => [f64([5, 3])], (w) => embedding(idx([4, 0, 4, 2], [2, 2]), w)],
  ["view / reshape / flatten", () => [f64([2, 3, 4])], (a) => a.view(6, 4).reshape([4, 6]).flatten()],
  ["reshape of non-contiguous", () => [f64([3, 4])], (a) => a.t().reshape(12)],
  ["permute", () => [f64([2, 3, 4])], (a) => a.permute(2, 0, 1).mul(tensor([1, 2, 3], { dtype: "float64" }))],
  ["transpose", () => [f64([2, 3, 4])], (a) => a.transpose(0, 2).exp()],
  [
    "narrow / select / slice",
    () => [f64([4, 5])],
    (a) =>
      a
        .narrow(0, 1, 2)
        .sum()
        .add(a.select(1, 3).sum())
        .add(a.slice(1, 0, 5, 2).exp().sum()),
  ],
  ["expand", () => [f64([3, 1])], (a) => a.expand(2, 3, 4).mul(tensor([1, 2, 3, 4], { dtype: "float64" }))],
  ["squeeze / unsqueeze", () => [f64([3, 1, 2])], (a) => a.squeeze(1).unsqueeze(0).exp()],
  ["contiguous / clone", () => [f64([3, 4])], (a) => a.t().contiguous().clone().mul(2)],
  ["cat", () => [f64([2, 3]), f64([1, 3])], (a, b) => cat([a, b.exp(), a], 0)],
  ["cat dim 1", () => [f64([2, 3]), f64([2, 1])], (a, b) => cat([a, b], 1)],
  ["stack", () => [f64([2, 3]), f64([2, 3])], (a, b) => stack([a, b], 1)],
  [
    "split / chunk",
    () => [f64([5, 2])],
    (a) => {
      const [p, q] = a.split([2, 3]);
      const c = a.chunk(2, 0);
      return p!.sum().mul(q!.exp().sum()).add(c[1]!.square().sum());
    },
  ],
  [
    "in-place on a non-leaf",
    () => [f64([3, 4])],
    (a) => {
      const y = a.mul(2);
      y.add_(1).mul_(3).exp_().sigmoid_();
      return y;
    },
  ],
];

describeEachBackend("gradcheck", () => {
  it.each(cases)("%s", (_name, make, fn) => {
    manualSeed(1234);
    const inputs = make();
    const r = autograd.gradcheck(fn, inputs);
    expect(r.worst === "" || r.ok, r.worst).toBe(true);
    expect(r.ok).toBe(true);
  });
});
