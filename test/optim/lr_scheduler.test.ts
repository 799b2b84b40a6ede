/**
 * Learning-rate schedulers: the lr each epoch for StepLR, LambdaLR (one or
 * per-group lambdas) and CosineAnnealingLR (torch's recursive form against
 * the closed form), and the initialLr they leave on each group.
 */
import { describe, expect, it } from "vitest";
import { optim, tensor, ValueError } from "../../sdk/index.js";

const { StepLR, LambdaLR, CosineAnnealingLR } = optim.lrScheduler;

function sgd(...lrs: number[]): optim.SGD {
  return new optim.SGD(lrs.map((lr) => ({ params: [tensor([1], { dtype: "float32", requiresGrad: true })], lr })));
}

/** lrs of every group after construction and after each of `n` steps. */
function trace(opt: optim.SGD, sched: { step(): void }, n: number): number[][] {
  const out = [opt.paramGroups.map((g) => g.lr)];
  for (let i = 0; i < n; i++) {
    opt.step();
    sched.step();
    out.push(opt.paramGroups.map((g) => g.lr));
  }
  return out;
}

describe("StepLR", () => {
  it("multiplies by gamma every stepSize epochs", () => {
    const opt = sgd(1, 0.1);
    const sched = new StepLR(opt, 2, 0.5);
    const lrs = trace(opt, sched, 5);
    const want = [1, 1, 0.5, 0.5, 0.25, 0.25];
    lrs.forEach((l, e) => {
      expect(l[0]).toBeCloseTo(want[e]!, 12);
      expect(l[1]).toBeCloseTo(want[e]! * 0.1, 12);
    });
    expect(sched.getLastLr()).toEqual(opt.paramGroups.map((g) => g.lr));
    expect(sched.lastEpoch).toBe(5);
    expect(opt.paramGroups.map((g) => g.initialLr)).toEqual([1, 0.1]);
  });

  it("refuses a non-positive stepSize", () => {
    expect(() => new StepLR(sgd(1), 0)).toThrow(ValueError);
  });
});

describe("LambdaLR", () => {
  it("sets lr = initialLr * lambda(epoch), one lambda per group", () => {
    const opt = sgd(1, 2);
    const sched = new LambdaLR(opt, [(e) => 0.9 ** e, (e) => 1 / (e + 1)]);
    const lrs = trace(opt, sched, 3);
    lrs.forEach((l, e) => {
      expect(l[0]).toBeCloseTo(0.9 ** e, 12);
      expect(l[1]).toBeCloseTo(2 / (e + 1), 12);
    });
  });

  it("shares one lambda between groups, and wants one per group when given a list", () => {
    const opt = sgd(1, 3);
    new LambdaLR(opt, () => 0.5);
    expect(opt.paramGroups.map((g) => g.lr)).toEqual([0.5, 1.5]);
    expect(() => new LambdaLR(sgd(1, 3), [() => 1])).toThrow("Expected 2 lrLambdas, but got 1");
  });
});

describe("CosineAnnealingLR", () => {
  it("follows etaMin + (base - etaMin) * (1 + cos(pi * epoch / tMax)) / 2, periodically", () => {
    const opt = sgd(0.1, 1);
    const tMax = 10;
    const etaMin = 0.001;
    const sched = new CosineAnnealingLR(opt, tMax, etaMin);
    const lrs = trace(opt, sched, 3 * tMax);
    lrs.forEach((l, e) => {
      [0.1, 1].forEach((base, i) => {
        const want = etaMin + ((base - etaMin) * (1 + Math.cos((Math.PI * e) / tMax))) / 2;
        expect(Math.abs(l[i]! - want)).toBeLessThan(1e-12);
      });
    });
  });

  it("keeps its counters in stateDict", () => {
    const opt = sgd(1);
    const sched = new CosineAnnealingLR(opt, 5);
    sched.step();
    sched.step();
    expect(sched.stateDict()).toMatchObject({ lastEpoch: 2, stepCount: 3, baseLrs: [1] });
  });
});
