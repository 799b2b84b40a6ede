/**
 * Loss functions (part of nn.functional), with torch 1.13's semantics:
 * mseLoss, nllLoss, crossEntropy (class indices or class probabilities,
 * class weights, ignoreIndex, label smoothing) and
 * binaryCrossEntropyWithLogits. Composites of differentiable ops: the
 * gradient with respect to the input comes from autograd.
 *
 * Shapes for class-index targets: input [C] with target [] ; [N, C] with
 * [N] ; [N, C, d1, ...] with [N, d1, ...]. The mean over class indices is
 * weighted: sum(w[t_i] * loss_i) / sum(w[t_i]) over the targets that are not
 * ignoreIndex, so it is NaN when every target is ignored, as in PyTorch.
 */
import { DTypeError, IndexError, ShapeError, ValueError } from "../errors/index.js";
import { where } from "../autograd/ops/elementwise.js";
import { nllRows } from "../autograd/ops/nll.js";
import type { Tensor } from "../tensor/tensor.js";
import { dropping } from "./intermediates.js";

export type Reduction = "mean" | "sum" | "none";

export interface WeightedLossOptions {
  /** A weight per class, shape [C]. */
  weight?: Tensor | null;
  /** Targets equal to this contribute neither loss nor gradient (class indices only). */
  ignoreIndex?: number;
  reduction?: Reduction;
}

export interface CrossEntropyOptions extends WeightedLossOptions {
  /** In [0, 1]: the target becomes (1 - s) * onehot + s / C. */
  labelSmoothing?: number;
}

export interface BCEWithLogitsOptions {
  /** Rescales each element's loss (broadcast to the input). */
  weight?: Tensor | null;
  /** Weight of positive examples, broadcast along the last (class) dim. */
  posWeight?: Tensor | null;
  reduction?: Reduction;
}

const shapeStr = (s: readonly number[]): string => `[${s.join(", ")}]`;

function checkReduction(r: string): Reduction {
  if (r !== "mean" && r !== "sum" && r !== "none")
    throw new ValueError(`${r} is not a valid value for reduction; use "mean", "sum" or "none"`);
  return r;
}

function reduce(loss: Tensor, reduction: Reduction): Tensor {
  return reduction === "mean" ? loss.mean() : reduction === "sum" ? loss.sum() : loss;
}

/** Mean (or summed, or elementwise) squared error; target broadcasts to the input as in PyTorch. */
export function mseLoss(input: Tensor, target: Tensor, opts: { reduction?: Reduction } = {}): Tensor {
  return reduce(input.sub(target).square(), checkReduction(opts.reduction ?? "mean"));
}

function checkWeight(weight: Tensor | null | undefined, C: number): void {
  if (weight && (weight.ndim !== 1 || weight.shape[0] !== C))
    throw new ShapeError(
      `weight tensor should be defined either for all ${C} classes or no classes but got weight tensor of shape: ${shapeStr(weight.shape)}`,
    );
}

function checkFloatingInput(input: Tensor, what: string): void {
  if (!input.isFloatingPoint()) throw new DTypeError(`${what}: expected a floating point input, got ${input.dtype}`);
  if (input.ndim < 1) throw new ShapeError(`Expected 1 or more dimensions (got ${input.ndim})`);
}

/** Checks an index target against an input of log-probabilities; returns the class dim. */
function checkIndexTarget(
  input: Tensor,
  target: Tensor,
  weight: Tensor | null | undefined,
  ignoreIndex: number,
): number {
  if (target.dtype !== "int64" && target.dtype !== "int32")
    throw new DTypeError(
      `expected target of dtype int64 (class indices) but found ${target.dtype}; ` +
        `class probabilities must be floating point with the input's shape ${shapeStr(input.shape)}`,
    );
  const classDim = input.ndim === 1 ? 0 : 1;
  const C = input.shape[classDim]!;
  if (input.ndim === 1) {
    if (target.ndim !== 0)
      throw new ShapeError(
        `Expected a 0-dim target (one class index) for a 1-D input of shape ${shapeStr(input.shape)}, got target of shape ${shapeStr(target.shape)}`,
      );
  } else {
    if (target.ndim === 0 || target.shape[0] !== input.shape[0])
      throw new ShapeError(
        `Expected input batch_size (${input.shape[0]}) to match target batch_size (${target.ndim === 0 ? 0 : target.shape[0]}).`,
      );
    const want = [input.shape[0]!, ...input.shape.slice(2)];
    if (input.ndim === 2 && target.ndim !== 1)
      throw new ShapeError("0D or 1D target tensor expected, multi-target not supported");
    if (target.ndim !== want.length || target.shape.some((d, i) => d !== want[i]))
      throw new ShapeError(`Expected target size ${shapeStr(want)}, got ${shapeStr(target.shape)}`);
  }
  checkWeight(weight, C);
  // NB: a target on a GPU is checked there, by the gather that picks its class (nllParts): reading
  // it back here would wait for the device every step. Its IndexError comes at the next
  // synchronization, as PyTorch's device-side check does.
  if (target.device.type === "cpu")
    for (const t of target.toArray())
      if (t !== ignoreIndex && (t < 0 || t >= C)) throw new IndexError(`Target ${t} is out of bounds.`);
  return classDim;
}

/**
 * Whether NLL of `logp` at `target` takes sdk/autograd/ops/nll.ts's one-node form: rows of CPU
 * log-probabilities [N, C] at N class indices, no class weights. Its values are the general form's.
 */
function rowsForm(logp: Tensor, target: Tensor, weight: Tensor | null | undefined): boolean {
  return (
    !weight &&
    logp.ndim === 2 &&
    target.ndim === 1 &&
    logp.device.type === "cpu" &&
    (logp.dtype === "float32" || logp.dtype === "float64")
  );
}

/** A CPU class-index target's values (checked by checkIndexTarget). */
function targetValues(target: Tensor): number[] {
  return target.toArray() as number[];
}

interface NllParts {
  /** Per-target loss, w[t] * -logp[t], 0 where ignored (target's shape). */
  loss: Tensor;
  /** Per-target weight w[t], 0 where ignored: the mean's denominator. */
  weights: Tensor;
  valid: Tensor;
}

function nllParts(
  logp: Tensor,
  target: Tensor,
  weight: Tensor | null | undefined,
  ignoreIndex: number,
  classDim: number,
): NllParts {
  const valid = target.ne(ignoreIndex);
  // NB: off the CPU, a negative target (not ignoreIndex) goes to the gather as -C - 1, which its
  // device-side check rejects; a plain negative index would pick a class from the end
  const safe =
    target.device.type === "cpu"
      ? where(valid, target, 0)
      : where(valid, where(target.lt(0), -logp.shape[classDim]! - 1, target), 0);
  const picked = logp.gather(classDim, safe.unsqueeze(classDim)).squeeze(classDim);
  const w = weight
    ? where(valid, weight.detach().to(logp.dtype).indexSelect(0, safe.flatten()).reshape(target.shape), 0)
    : valid.to(logp.dtype);
  // NB: where, not a multiply by 0, so an ignored target whose log-probability is -inf gives 0, not NaN.
  return { loss: where(valid, picked.neg().mul(w), 0), weights: w, valid };
}

function nllReduce(p: NllParts, reduction: Reduction): Tensor {
  if (reduction === "none") return p.loss;
  if (reduction === "sum") return p.loss.sum();
  return p.loss.sum().div(p.weights.sum());
}

/** Negative log likelihood of log-probabilities `input` at class indices `target`. */
export function nllLoss(input: Tensor, target: Tensor, opts: WeightedLossOptions = {}): Tensor {
  checkFloatingInput(input, "nllLoss");
  const ignoreIndex = opts.ignoreIndex ?? -100;
  const reduction = checkReduction(opts.reduction ?? "mean");
  const classDim = checkIndexTarget(input, target, opts.weight, ignoreIndex);
  if (rowsForm(input, target, opts.weight)) return nllRows(input, targetValues(target), ignoreIndex, reduction);
  return nllReduce(nllParts(input, target, opts.weight, ignoreIndex, classDim), reduction);
}

/**
 * Cross entropy between logits `input` and a target of class indices
 * (int64) or of class probabilities (floating point, the input's shape).
 */
export function crossEntropy(input: Tensor, target: Tensor, opts: CrossEntropyOptions = {}): Tensor {
  // NB: the log-probabilities and the rest made here are this function's own (sdk/nn/intermediates.ts)
  return dropping(true, (drop) => crossEntropyOf(input, target, opts, drop));
}

function crossEntropyOf(input: Tensor, target: Tensor, opts: CrossEntropyOptions, drop: Tensor[]): Tensor {
  checkFloatingInput(input, "crossEntropy");
  const ignoreIndex = opts.ignoreIndex ?? -100;
  const reduction = checkReduction(opts.reduction ?? "mean");
  const smoothing = opts.labelSmoothing ?? 0;
  if (!(smoothing >= 0 && smoothing <= 1))
    throw new ValueError(`label_smoothing must be between 0.0 and 1.0. Got: ${smoothing}`);
  const weight = opts.weight ?? null;
  const classDim = input.ndim === 1 ? 0 : 1;
  const C = input.shape[classDim]!;
  checkWeight(weight, C);
  // the class weight shaped to broadcast along the class dim: [C, 1, ..., 1]
  const wView = weight
    ? weight
        .detach()
        .to(input.dtype)
        .reshape([C, ...input.shape.slice(classDim + 1).map(() => 1)])
    : null;
  const sameShape = target.ndim === input.ndim && target.shape.every((d, i) => d === input.shape[i]);
  if (sameShape && target.dtype !== "int64" && target.dtype !== "int32") {
    if (!target.isFloatingPoint())
      throw new DTypeError(`Expected floating point type for target with class probabilities, got ${target.dtype}`);
    if (ignoreIndex >= 0) throw new ValueError("ignore_index is not supported for floating point target");
    const logp = input.logSoftmax(classDim);
    drop.push(logp);
    const tgt = smoothing > 0 ? target.mul(1 - smoothing).add(smoothing / C) : target;
    let prod = logp.mul(tgt);
    if (wView) prod = prod.mul(wView);
    if (reduction === "none") return prod.sum(classDim).neg();
    if (reduction === "sum") return prod.sum().neg();
    return prod
      .sum()
      .neg()
      .div(input.numel() / C);
  }
  checkIndexTarget(input, target, weight, ignoreIndex);
  const logp = input.logSoftmax(classDim);
  drop.push(logp);
  if (smoothing === 0 && rowsForm(logp, target, weight))
    return nllRows(logp, targetValues(target), ignoreIndex, reduction);
  const parts = nllParts(logp, target, weight, ignoreIndex, classDim);
  const nll = nllReduce(parts, reduction);
  if (smoothing === 0) return nll;
  // torch: smooth_i = -sum_c w_c logp_ic (0 where ignored), reduced with nll's denominator
  const smooth = where(parts.valid, (wView ? logp.mul(wView) : logp).sum(classDim).neg(), 0);
  const ret =
    reduction === "none" ? smooth : reduction === "sum" ? smooth.sum() : smooth.sum().div(parts.weights.sum());
  return nll.mul(1 - smoothing).add(ret.mul(smoothing / C));
}

/**
 * Binary cross entropy on logits, computed stably as torch does:
 * (1 - t) x + lw (log(exp(-m) + exp(-x - m)) + m) with m = max(-x, 0) and
 * lw = 1 + (posWeight - 1) t.
 */
export function binaryCrossEntropyWithLogits(input: Tensor, target: Tensor, opts: BCEWithLogitsOptions = {}): Tensor {
  if (target.ndim !== input.ndim || target.shape.some((d, i) => d !== input.shape[i]))
    throw new ShapeError(
      `Target size (${shapeStr(target.shape)}) must be the same as input size (${shapeStr(input.shape)})`,
    );
  const reduction = checkReduction(opts.reduction ?? "mean");
  const m = input.neg().clamp(0);
  const softplus = m.neg().exp().add(input.neg().sub(m).exp()).log().add(m);
  const lw = opts.posWeight ? opts.posWeight.sub(1).mul(target).add(1) : null;
  let loss = target
    .neg()
    .add(1)
    .mul(input)
    .add(lw ? lw.mul(softplus) : softplus);
  if (opts.weight) loss = loss.mul(opts.weight);
  return reduce(loss, reduction);
}
