/**
 * Gradient clipping, torch.nn.utils.clip_grad_norm_ / clip_grad_value_ (1.13):
 * both change the gradients of the given parameters in place and skip
 * parameters without one.
 *
 *   loss.backward();
 *   const total = optim.clipGradNorm(params, 1.0);   // 0-dim tensor: the norm before clipping
 *   opt.step();
 */
import "../autograd/methods.js";
import { noGrad } from "../autograd/grad_mode.js";
import { div } from "../autograd/ops/elementwise.js";
import { stack } from "../autograd/ops/views.js";
import { ValueError } from "../errors/index.js";
import { peekGrad } from "../autograd/grad_slot.js";
import { zeros } from "../tensor/creation.js";
import { Tensor } from "../tensor/tensor.js";

function withGrads(parameters: Tensor | Iterable<Tensor>): Tensor[] {
  const list = parameters instanceof Tensor ? [parameters] : [...parameters];
  // NB: peekGrad: clipping scales or clamps the gradients in place and keeps none (sdk/autograd/grad_slot.ts)
  return list.filter((p) => peekGrad(p) !== null);
}

/** The p-norm of all elements of t (torch.linalg.vector_norm), as a 0-dim tensor. */
function vectorNorm(t: Tensor, p: number): Tensor {
  if (p === Number.POSITIVE_INFINITY) return t.abs().max();
  if (p === Number.NEGATIVE_INFINITY) return t.abs().min();
  if (p === 0) return t.ne(0).sum().to(t.dtype);
  if (p === 1) return t.abs().sum();
  if (p === 2) return t.mul(t).sum().sqrt();
  return t
    .abs()
    .pow(p)
    .sum()
    .pow(1 / p);
}

/**
 * Scales the gradients so that their total norm (the normType-norm of the
 * per-parameter gradient norms) is at most maxNorm, and returns that total
 * norm (before clipping) as a 0-dim tensor. As torch 1.13, every gradient is
 * multiplied by min(maxNorm / (total + 1e-6), 1). normType may be Infinity
 * (largest absolute value). With errorIfNonfinite, a NaN or infinite total
 * norm throws instead of scaling.
 */
export function clipGradNorm(
  parameters: Tensor | Iterable<Tensor>,
  maxNorm: number,
  normType = 2,
  errorIfNonfinite = false,
): Tensor {
  if (typeof maxNorm !== "number" || Number.isNaN(maxNorm))
    throw new ValueError(`clipGradNorm: maxNorm must be a number, got ${String(maxNorm)}`);
  if (typeof normType !== "number" || Number.isNaN(normType) || normType < 0)
    throw new ValueError(`clipGradNorm: normType must be a number >= 0 or Infinity, got ${String(normType)}`);
  const params = withGrads(parameters);
  if (params.length === 0) return zeros([]);
  return noGrad(() => {
    const grads = params.map((p) => peekGrad(p)!);
    const norms = grads.map((g) => vectorNorm(g.detach(), normType));
    const total =
      normType === Number.POSITIVE_INFINITY
        ? norms.length === 1
          ? norms[0]!
          : stack(norms).max()
        : vectorNorm(stack(norms), normType);
    if (errorIfNonfinite && !Number.isFinite(total.item()))
      throw new ValueError(
        `The total norm of order ${normType} for gradients from \`parameters\` is non-finite, so it cannot be clipped. ` +
          "To disable this error and scale the gradients by the non-finite norm anyway, pass errorIfNonfinite = false",
      );
    const coef = div(maxNorm, total.add(1e-6)).clamp(null, 1.0);
    for (const g of grads) g.mul_(coef);
    return total;
  });
}

/** Clamps every gradient into [-clipValue, clipValue] in place (torch's clip_grad_value_). */
export function clipGradValue(parameters: Tensor | Iterable<Tensor>, clipValue: number): void {
  if (typeof clipValue !== "number" || Number.isNaN(clipValue))
    throw new ValueError(`clipGradValue: clipValue must be a number, got ${String(clipValue)}`);
  noGrad(() => {
    for (const p of withGrads(parameters)) peekGrad(p)!.clamp_(-clipValue, clipValue);
  });
}
