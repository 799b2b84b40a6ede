/**
 * clipGradNorm and clipGradValue: the total norm they report (a 0-dim tensor,
 * the norm of the per-parameter norms), the in-place scaling torch 1.13
 * applies (by min(maxNorm / (total + 1e-6), 1)), inf and other norm types,
 * parameters without gradients, and non-finite norms.
 */
import { describe, expect, it } from "vitest";
import { optim, type Tensor, tensor, ValueError } from "../../sdk/index.js";
import { expectValues } from "./helpers.js";

/** Parameters with gradients [3, 4] (2-norm 5) and [[12], [0]] (2-norm 12); one more without a gradient. */
function setup(): { params: Tensor[]; grads: Tensor[] } {
  const a = tensor([0.5, 0.5], { dtype: "float32", requiresGrad: true });
  const b = tensor([[1], [2]], { dtype: "float32", requiresGrad: true });
  const c = tensor([7], { dtype: "float32", requiresGrad: true });
  a.grad = tensor([3, -4], { dtype: "float32" });
  b.grad = tensor([[12], [0]], { dtype: "float32" });
  return { params: [a, b, c], grads: [a.grad, b.grad] };
}

describe("clipGradNorm", () => {
  it("returns the total 2-norm as a 0-dim tensor and scales the gradients in place", () => {
    const { params, grads } = setup();
    const total = optim.clipGradNorm(params, 1.3);
    expect(total.shape).toEqual([]);
    expect(total.item()).toBeCloseTo(13, 5);
    const coef = 1.3 / (13 + 1e-6);
    expect(params[0]!.grad).toBe(grads[0]);
    expect(params[1]!.grad).toBe(grads[1]);
    expectValues(grads[0]!, [3 * coef, -4 * coef], 1e-6);
    expectValues(grads[1]!, [12 * coef, 0], 1e-6);
    expect(params[2]!.grad).toBeNull();
    // the clipped gradients have (almost exactly) the requested norm
    const after = Math.hypot(...grads.flatMap((g) => g.toArray()));
    expect(after).toBeCloseTo(1.3, 5);
  });

  it("leaves gradients as they are when the norm is below maxNorm (the coefficient is clamped to 1)", () => {
    const { params, grads } = setup();
    const total = optim.clipGradNorm(params, 100);
    expect(total.item()).toBeCloseTo(13, 5);
    expect(grads[0]!.toArray()).toEqual([3, -4]);
    expect(grads[1]!.toArray()).toEqual([12, 0]);
  });

  it("supports the inf norm (largest absolute value)", () => {
    const { params, grads } = setup();
    const total = optim.clipGradNorm(params, 6, Number.POSITIVE_INFINITY);
    expect(total.item()).toBe(12);
    const coef = 6 / (12 + 1e-6);
    expectValues(grads[0]!, [3 * coef, -4 * coef], 1e-6);
    expectValues(grads[1]!, [12 * coef, 0], 1e-6);
  });

  it("supports other p-norms: the p-norm of the per-parameter p-norms", () => {
    const one = setup();
    expect(optim.clipGradNorm(one.params, 1000, 1).item()).toBeCloseTo(19, 5); // |7| + |12|
    const three = setup();
    const n3 = (xs: number[]): number => Math.cbrt(xs.reduce((s, x) => s + Math.abs(x) ** 3, 0));
    expect(optim.clipGradNorm(three.params, 1000, 3).item()).toBeCloseTo(n3([n3([3, -4]), n3([12, 0])]), 4);
  });

  it("takes a single tensor, and returns 0 when no parameter has a gradient", () => {
    const { params, grads } = setup();
    expect(optim.clipGradNorm(params[0]!, 1).item()).toBeCloseTo(5, 5);
    expectValues(grads[0]!, [3 / (5 + 1e-6), -4 / (5 + 1e-6)], 1e-6);
    expect(optim.clipGradNorm([params[2]!], 1).item()).toBe(0);
  });

  it("throws on a non-finite total norm with errorIfNonfinite, and scales by it otherwise", () => {
    const { params, grads } = setup();
    grads[0]!.copy_(tensor([Number.NaN, 1]));
    expect(() => optim.clipGradNorm(params, 1, 2, true)).toThrow(ValueError);
    expect(() => optim.clipGradNorm(params, 1, 2, true)).toThrow("non-finite");
    expect(grads[1]!.toArray()).toEqual([12, 0]);
    expect(Number.isNaN(optim.clipGradNorm(params, 1).item())).toBe(true);
  });
});

describe("clipGradValue", () => {
  it("clamps every gradient into [-clipValue, clipValue] in place", () => {
    const { params, grads } = setup();
    optim.clipGradValue(params, 3.5);
    expect(params[0]!.grad).toBe(grads[0]);
    expect(grads[0]!.toArray()).toEqual([3, -3.5]);
    expect(grads[1]!.toArray()).toEqual([3.5, 0]);
    expect(params[2]!.grad).toBeNull();
  });
});
