/**
 * Gradient checking by central finite differences, in float64, as
 * torch.autograd.gradcheck: for every input element, perturb by ±eps and
 * compare the numeric Jacobian-vector products with backward's gradients.
 */
import { AutogradError } from "../errors/index.js";
import * as raw from "../tensor/raw.js";
import type { Tensor } from "../tensor/tensor.js";
import { grad } from "./engine.js";
import { noGrad } from "./grad_mode.js";

export interface GradcheckOptions {
  eps?: number;
  atol?: number;
  rtol?: number;
  /** Upstream gradient seed; the output is reduced as sum(out * w) with fixed pseudo-random w. */
  seed?: number;
}

export interface GradcheckResult {
  ok: boolean;
  maxAbsErr: number;
  /** "input i, element j: analytic a vs numeric n" for the worst mismatch. */
  worst: string;
}

function weights(n: number, seed: number): Float64Array {
  // a small LCG: deterministic, independent of the global generator
  const w = new Float64Array(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    w[i] = (s / 4294967296) * 2 - 1;
  }
  return w;
}

/**
 * Checks `fn` at `inputs` (float64 tensors; those with requiresGrad are
 * checked). Returns the result; `assertGradcheck` throws on mismatch.
 */
export function gradcheck(
  fn: (...xs: Tensor[]) => Tensor,
  inputs: Tensor[],
  opts: GradcheckOptions = {},
): GradcheckResult {
  const eps = opts.eps ?? 1e-6;
  const atol = opts.atol ?? 1e-5;
  const rtol = opts.rtol ?? 1e-3;
  for (const x of inputs)
    if (x.requiresGrad && x.dtype !== "float64")
      throw new AutogradError(`gradcheck needs float64 inputs for precision, got ${x.dtype}; use .double()`);
  const out0 = fn(...inputs);
  const w = weights(out0.numel(), opts.seed ?? 7);
  const wT = raw.empty(out0.shape, "float64");
  (wT.storage.data as Float64Array).set(w);
  const scalar = (xs: Tensor[]): number =>
    noGrad(() => {
      const o = raw.contiguous(raw.cast(fn(...xs), "float64")).toArray();
      let s = 0;
      for (let i = 0; i < o.length; i++) s += o[i]! * w[i]!;
      return s;
    });
  const checked = inputs.filter((x) => x.requiresGrad);
  const analytic = grad(out0.mul(wT).sum(), checked, { allowUnused: true });
  let maxAbsErr = 0;
  let worst = "";
  let ok = true;
  checked.forEach((x, k) => {
    const a = analytic[k] ? raw.contiguous(analytic[k]!).toArray() : new Array<number>(x.numel()).fill(0);
    const data = x.storage.data as Float64Array;
    if (!x.isContiguous()) throw new AutogradError("gradcheck needs contiguous inputs; call .contiguous() first");
    for (let j = 0; j < x.numel(); j++) {
      const at = x.offset + j;
      const orig = data[at]!;
      data[at] = orig + eps;
      const fp = scalar(inputs);
      data[at] = orig - eps;
      const fm = scalar(inputs);
      data[at] = orig;
      const num = (fp - fm) / (2 * eps);
      const err = Math.abs(num - a[j]!);
      if (err > maxAbsErr) {
        maxAbsErr = err;
        worst = `input ${inputs.indexOf(x)}, element ${j}: analytic ${a[j]} vs numeric ${num}`;
      }
      if (err > atol + rtol * Math.abs(num)) ok = false;
    }
  });
  return { ok, maxAbsErr, worst };
}

export function assertGradcheck(fn: (...xs: Tensor[]) => Tensor, inputs: Tensor[], opts: GradcheckOptions = {}): void {
  const r = gradcheck(fn, inputs, opts);
  if (!r.ok) throw new AutogradError(`Jacobian mismatch: ${r.worst} (max abs err ${r.maxAbsErr})`);
}
