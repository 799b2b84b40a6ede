/**
 * Helpers for the optim suites: seeded parameters and gradients as float64 or
 * float32 tensors, and element-wise comparison with a relative tolerance.
 */
import { expect } from "vitest";
import { type DType, manualSeed, randn, type Tensor, tensor } from "../../sdk/index.js";

export const SHAPES: number[][] = [[3, 4], [5]];

/** Seeded random values for each shape (row-major), as plain numbers. */
export function randomVecs(seed: number, shapes: number[][] = SHAPES): number[][] {
  manualSeed(seed);
  return shapes.map((s) => randn(s, { dtype: "float64" }).toArray());
}

/** A fresh contiguous tensor (not a view) of the given shape. */
function shaped(values: number[], shape: number[], dtype: DType): Tensor {
  return tensor(tensor(values, { dtype }).reshape(shape));
}

/** Leaf tensors that require grad, from row-major values. */
export function leaves(values: number[][], dtype: DType = "float64", shapes: number[][] = SHAPES): Tensor[] {
  return values.map((v, i) => tensor(shaped(v, shapes[i]!, dtype), { requiresGrad: true }));
}

export function setGrads(params: Tensor[], grads: number[][]): void {
  params.forEach((p, i) => {
    p.grad = tensor(shaped(grads[i]!, [...p.shape], p.dtype));
  });
}

/** |got - want| <= atol + rtol * |want| for every element. */
export function expectValues(got: Tensor | number[], want: number[], rtol: number, atol = 0, what = "value"): void {
  const g = Array.isArray(got) ? got : got.toArray();
  expect(g.length, `${what}: length`).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    const ok = Math.abs(g[i]! - want[i]!) <= atol + rtol * Math.abs(want[i]!);
    if (!ok) expect.fail(`${what}[${i}]: got ${g[i]}, want ${want[i]} (rtol ${rtol}, atol ${atol})`);
  }
}
