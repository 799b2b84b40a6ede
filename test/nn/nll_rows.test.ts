/**
 * crossEntropy and nllLoss on rows of CPU log-probabilities at class indices, no class weights, take
 * sdk/autograd/ops/nll.ts's one-node form (NllLossBackward0, as torch records it). Its values and
 * gradients must be the general form's bit for bit: here the general form is spelled out with the
 * public ops it is made of (gather, where, sum, div), on the same log-probabilities.
 */
import { expect, it } from "vitest";
import { type Tensor, manualSeed, nn, randint, randn, where } from "../../sdk/index.js";
import { describeEachBackend } from "../helpers.js";

const F = nn.functional;
type Reduction = "mean" | "sum" | "none";

/** nll of logp [N, C] at target [N] as the general form computes it. */
function composite(logp: Tensor, target: Tensor, ignoreIndex: number, reduction: Reduction): Tensor {
  const valid = target.ne(ignoreIndex);
  const safe = where(valid, target, 0);
  const picked = logp.gather(1, safe.unsqueeze(1)).squeeze(1);
  const w = valid.to(logp.dtype);
  const loss = where(valid, picked.neg().mul(w), 0);
  if (reduction === "none") return loss;
  if (reduction === "sum") return loss.sum();
  return loss.sum().div(w.sum());
}

/** The loss and the input's gradient, for a loss made from x by `f`. */
function run(x0: Tensor, f: (x: Tensor) => Tensor, seedGrad: Tensor | null): { loss: number[]; grad: number[] } {
  const x = x0.detach().requiresGrad_(true);
  const loss = f(x);
  loss.backward(seedGrad ?? undefined);
  return { loss: loss.flatten().toArray(), grad: x.grad!.flatten().toArray() };
}

describeEachBackend("nn: nll over rows in one node", () => {
  it("equals the general form bit for bit (float32, float64; every reduction; ignored rows)", () => {
    for (const dtype of ["float32", "float64"] as const)
      for (const reduction of ["mean", "sum", "none"] as const)
        for (const ignoreIndex of [-100, 3]) {
          manualSeed(7);
          const x = randn([37, 10], { dtype }).mul(3);
          const target = randint(0, 10, [37]);
          const g = randn(reduction === "none" ? [37] : [], { dtype });
          const fast = run(x, (t) => F.crossEntropy(t, target, { reduction, ignoreIndex }), g);
          const general = run(x, (t) => composite(t.logSoftmax(1), target, ignoreIndex, reduction), g);
          expect(fast).toEqual(general);
          const nll = run(x, (t) => F.nllLoss(t.logSoftmax(1), target, { reduction, ignoreIndex }), g);
          expect(nll).toEqual(general);
        }
  });

  it("records NllLossBackward0 after LogSoftmaxBackward0, as torch does", () => {
    const x = randn([4, 3]).requiresGrad_(true);
    const loss = F.crossEntropy(x, randint(0, 3, [4]));
    expect(loss.gradFn?.name).toBe("NllLossBackward0");
    // NB: the node's inputs, as torch's grad_fn.next_functions
    const node = loss.gradFn as unknown as { next: readonly ({ name: string } | null)[] };
    expect(node.next.map((n) => n?.name)).toEqual(["LogSoftmaxBackward0"]);
  });

  it("is NaN with every row ignored, and gives zero gradients", () => {
    const x = randn([3, 4]).requiresGrad_(true);
    const target = randint(0, 4, [3]).fill_(-100);
    const loss = F.crossEntropy(x, target);
    expect(Number.isNaN(loss.item())).toBe(true);
    loss.backward();
    expect(
      x
        .grad!.flatten()
        .toArray()
        .every((v) => v === 0),
    ).toBe(true);
  });
});
