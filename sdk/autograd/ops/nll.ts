/**
 * nll_loss over the rows of CPU log-probabilities [N, C] at class indices, with no class weights: the
 * form crossEntropy takes in notebook 03's FedAvg and notebook 04's GPT. One node, NllLossBackward0,
 * as torch records it (crossEntropy's loss.gradFn, then LogSoftmaxBackward0). The general form in
 * sdk/nn/losses.ts (gather, where, sum, div, and a backward for each) was about twenty small ops a
 * step; here the N picked values are read and the gradient's N entries written directly.
 *
 * The values are the general form's, bit for bit: each row's loss is -logp[i, t_i] (0 for an ignored
 * row), summed by the backend's reduction (float64 partial sums, rounded once to the dtype); "mean"
 * divides that by the count of rows not ignored (NaN when none is). Backward writes -g / count
 * ("mean", rounded to the dtype), -g ("sum") or -g_i ("none") at each kept row's target, zeros elsewhere.
 */
import type { DType } from "../../tensor/dtype.js";
import * as raw from "../../tensor/raw.js";
import type { Tensor } from "../../tensor/tensor.js";
import { recordOp } from "../function.js";

type Floats = Float32Array | Float64Array;

/** The dtype's rounding of a float64. */
const rounder = (dtype: DType): ((x: number) => number) => (dtype === "float32" ? Math.fround : (x) => x);

/**
 * NLL of `logp` ([N, C], CPU, float32 or float64) at `targets` (N class indices, already checked to be
 * in [0, C) or ignoreIndex).
 */
export function nllRows(
  logp: Tensor,
  targets: readonly number[],
  ignoreIndex: number,
  reduction: "none" | "mean" | "sum",
): Tensor {
  const [N, C] = logp.shape as [number, number];
  const { dtype, device } = logp;
  const round = rounder(dtype);
  const lp = logp.storage.data as Floats;
  const [s0, s1] = logp.strides as [number, number];
  const base = logp.offset;
  let count = 0;
  const per = raw.output([N], dtype, device);
  const pd = per.storage.data as Floats;
  for (let i = 0; i < N; i++) {
    const t = targets[i]!;
    if (t === ignoreIndex) pd[i] = 0;
    else {
      count++;
      pd[i] = -lp[base + i * s0 + t * s1]!;
    }
  }
  // NB: the sum by the backend's own reduction, as the general form sums (its order of float64 partial sums)
  let out = per;
  if (reduction !== "none") {
    out = raw.reduce("sum", per, [0], false);
    if (reduction === "mean") {
      const s = out.storage.data as Floats;
      s[out.offset] = round(s[out.offset]! / count);
    }
  }
  return recordOp("NllLossBackward0", out, [logp], (g) => {
    const grad = raw.empty([N, C], dtype, device);
    const gd = grad.storage.data as Floats;
    const gs = g.storage.data as Floats;
    const scalar = reduction === "none" ? 0 : -round(reduction === "mean" ? gs[g.offset]! / count : gs[g.offset]!);
    const gStride = g.ndim === 1 ? g.strides[0]! : 0;
    for (let i = 0; i < N; i++) {
      const t = targets[i]!;
      if (t === ignoreIndex) continue;
      gd[i * C + t] = reduction === "none" ? -gs[g.offset + i * gStride]! : scalar;
    }
    return [grad];
  });
}
