/**
 * End to end: a 2-layer MLP learns a seeded synthetic XOR-like task (label =
 * sign(x0 * x1)) with full-batch Adam written inline (sdk/optim is tested
 * on its own): cross entropy falls below 0.02, under a tenth of the start,
 * and every training point is classified right.
 */
import { describe, expect, it } from "vitest";
import { manualSeed, nn, noGrad, randn, type Tensor, zerosLike } from "../../sdk/index.js";

/** One Adam step (lr, betas 0.9/0.999, eps 1e-8) over params, in place. */
function adamStep(params: Tensor[], state: { m: Tensor; v: Tensor }[], step: number, lr: number): void {
  const [b1, b2, eps] = [0.9, 0.999, 1e-8];
  noGrad(() =>
    params.forEach((p, i) => {
      const g = p.grad!;
      const s = state[i]!;
      s.m.mul_(b1).add_(g, 1 - b1);
      s.v.mul_(b2).addcmul_(g, g, 1 - b2);
      const mHat = s.m.div(1 - b1 ** step);
      const vHat = s.v.div(1 - b2 ** step);
      p.sub_(mHat.div(vHat.sqrt().add(eps)).mul(lr));
    }),
  );
}

describe("training", () => {
  it("a 2-layer MLP fits an XOR-like 2-class problem (loss < 0.02 and < initial / 10)", () => {
    manualSeed(1234);
    const x = randn([64, 2]);
    const y = noGrad(() => x.select(1, 0).mul(x.select(1, 1)).gt(0).long());
    const model = new nn.Sequential(new nn.Linear(2, 16), new nn.Tanh(), new nn.Linear(16, 2));
    const lossFn = new nn.CrossEntropyLoss();
    const params = model.parameters();
    const state = params.map((p) => ({ m: zerosLike(p), v: zerosLike(p) }));
    let first = Number.NaN;
    let last = Number.NaN;
    for (let step = 1; step <= 300; step++) {
      model.zeroGrad();
      const loss = lossFn.forward(model.forward(x), y);
      loss.backward();
      adamStep(params, state, step, 0.05);
      if (step === 1) first = loss.item();
      last = loss.item();
    }
    expect(first).toBeGreaterThan(0.5);
    expect(last).toBeLessThan(0.02); // 0.709 -> 0.0020 with this seed
    expect(last).toBeLessThan(first / 10);
    const pred = noGrad(() => model.forward(x).argmax(1)).toArray();
    const labels = y.toArray();
    expect(pred.filter((p, i) => p === labels[i]).length).toBe(64);
  });
});
