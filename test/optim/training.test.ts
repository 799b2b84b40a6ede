/**
 * End to end: the usual loop (zeroGrad, forward, loss.backward(), step)
 * minimizes a loss computed with autograd — a quadratic bowl and a small
 * least-squares fit — with SGD, SGD with momentum, Adam and AdamW.
 */
import { describe, expect, it } from "vitest";
import { manualSeed, optim, randn, type Tensor, tensor, zeros } from "../../sdk/index.js";

type Make = (params: Tensor[]) => optim.Optimizer<object>;

const optimizers: [string, Make, number][] = [
  ["SGD", (p) => new optim.SGD(p, { lr: 0.1 }), 100],
  ["SGD momentum", (p) => new optim.SGD(p, { lr: 0.05, momentum: 0.9 }), 150],
  ["Adam", (p) => new optim.Adam(p, { lr: 0.1 }), 300],
  ["AdamW", (p) => new optim.AdamW(p, { lr: 0.1, weightDecay: 0 }), 300],
];

describe.each(optimizers)("%s", (_name, make, steps) => {
  it("minimizes a quadratic bowl sum((w - target)^2)", () => {
    const target = tensor([1.5, -2, 0.25], { dtype: "float32" });
    const w = zeros([3], { requiresGrad: true });
    const opt = make([w]);
    const losses: number[] = [];
    for (let i = 0; i < steps; i++) {
      opt.zeroGrad();
      const loss = w.sub(target).square().sum();
      loss.backward();
      opt.step();
      losses.push(loss.item());
    }
    expect(losses[losses.length - 1]!).toBeLessThan(1e-3 * losses[0]!);
    for (const [i, v] of w.toArray().entries()) expect(v).toBeCloseTo(target.toArray()[i]!, 1);
  });

  it("fits a least-squares problem mean((X w + b - y)^2)", () => {
    manualSeed(0);
    const X = randn([32, 4]);
    const wTrue = tensor([[1], [-1], [0.5], [2]], { dtype: "float32" });
    const y = X.matmul(wTrue).add(0.3);
    const w = zeros([4, 1], { requiresGrad: true });
    const b = zeros([1], { requiresGrad: true });
    const opt = make([w, b]);
    let first = 0;
    let last = 0;
    for (let i = 0; i < steps; i++) {
      opt.zeroGrad();
      const loss = X.matmul(w).add(b).sub(y).square().mean();
      loss.backward();
      opt.step();
      if (i === 0) first = loss.item();
      last = loss.item();
    }
    expect(last).toBeLessThan(0.01 * first);
  });
});
