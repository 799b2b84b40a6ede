/**
 * nn.functional: the stateless forms of the layers (linear, activations,
 * dropout, layerNorm, embedding, attention) and, re-exported from
 * ./losses.ts, the loss functions. Every function is a composite of
 * differentiable ops, so autograd supplies the backward; modules in
 * ./modules/ hold the parameters and call these.
 *
 *   import { nn } from "tprpc";
 *   const F = nn.functional;
 *   const y = F.gelu(F.linear(x, w, b));
 */
import { DTypeError, ShapeError, ValueError } from "../errors/index.js";
import * as E from "../autograd/ops/elementwise.js";
import { embedding as embeddingOp } from "../autograd/ops/indexing.js";
import { layerNorm as layerNormOp } from "../autograd/ops/norm.js";
import { linear2d } from "../autograd/ops/linalg.js";
import { arange, rand } from "../tensor/creation.js";
import type { Generator } from "../tensor/random.js";
import type { Tensor } from "../tensor/tensor.js";

export * from "./losses.js";

const shapeStr = (s: readonly number[]): string => `[${s.join(", ")}]`;

/** y = x Wᵀ + b, for x of shape [*, in], W [out, in], b [out]. */
export function linear(input: Tensor, weight: Tensor, bias?: Tensor | null): Tensor {
  if (weight.ndim !== 2 && weight.ndim !== 1)
    throw new ShapeError(
      `linear(): weight must be 1-D or 2-D ([outFeatures, inFeatures]), got shape ${shapeStr(weight.shape)}`,
    );
  let y: Tensor;
  const fused =
    input.ndim >= 2 &&
    weight.ndim === 2 &&
    input.dtype === weight.dtype &&
    input.isFloatingPoint() &&
    input.shape[input.ndim - 1] === weight.shape[1] &&
    (!bias || (bias.ndim === 1 && bias.shape[0] === weight.shape[0] && bias.dtype === weight.dtype));
  if (fused) {
    // one node: the bias is added inside the GEMM (sdk/autograd/ops/linalg.ts linear2d)
    const lead = input.shape.slice(0, -1);
    const x2 = input.ndim === 2 ? input : input.reshape(-1, input.shape[input.ndim - 1]!);
    const y2 = linear2d(x2, weight, bias ?? null);
    return input.ndim === 2 ? y2 : y2.reshape([...lead, weight.shape[0]!]);
  }
  if (input.ndim > 2 && weight.ndim === 2) {
    // NB: fold the batch dims into one so backward is one mm per operand, not a batched product summed over the batch.
    const lead = input.shape.slice(0, -1);
    y = input
      .reshape(-1, input.shape[input.ndim - 1]!)
      .matmul(weight.t())
      .reshape([...lead, weight.shape[0]!]);
  } else y = input.matmul(weight.t());
  return bias ? y.add(bias) : y;
}

export const relu = (input: Tensor): Tensor => input.relu();
export const tanh = (input: Tensor): Tensor => input.tanh();
export const sigmoid = (input: Tensor): Tensor => input.sigmoid();

/** GELU, exact (erf) by default or the tanh approximation with { approximate: "tanh" }. */
export function gelu(input: Tensor, opts: { approximate?: "none" | "tanh" } = {}): Tensor {
  const approximate = opts.approximate ?? "none";
  if (approximate !== "none" && approximate !== "tanh")
    throw new ValueError(`approximate argument must be either none or tanh, got "${String(approximate)}"`);
  return input.gelu({ approximate });
}

/** x * sigmoid(x). */
export const silu = (input: Tensor): Tensor => input.mul(input.sigmoid());

export const softmax = (input: Tensor, dim: number): Tensor => input.softmax(dim);
export const logSoftmax = (input: Tensor, dim: number): Tensor => input.logSoftmax(dim);

/**
 * Zeroes each element with probability p while `training`, scaling the
 * rest by 1/(1-p) so the expected value is unchanged; the identity when not
 * training or p = 0. The mask draws from the global generator (manualSeed).
 */
export function dropout(input: Tensor, p = 0.5, training = true, generator?: Generator): Tensor {
  if (!(p >= 0 && p <= 1)) throw new ValueError(`dropout probability has to be between 0 and 1, but got ${p}`);
  if (!training || p === 0 || input.numel() === 0) return input;
  if (!input.isFloatingPoint()) throw new DTypeError(`dropout expects a floating point input, got ${input.dtype}`);
  if (p === 1) return input.mul(0);
  const keep = rand(input.shape, { dtype: "float64", generator, device: input.device }).lt(1 - p);
  return input.mul(keep.to(input.dtype).mul(1 / (1 - p)));
}

/**
 * Layer normalisation over the trailing `normalizedShape` dims, with the
 * biased variance as PyTorch: (x - mean) / sqrt(var + eps) * weight + bias.
 * The variance is taken of the centred input (two passes), which stays
 * accurate when the mean is large against the spread.
 */
export function layerNorm(
  input: Tensor,
  normalizedShape: number | readonly number[],
  weight?: Tensor | null,
  bias?: Tensor | null,
  eps = 1e-5,
): Tensor {
  const ns = typeof normalizedShape === "number" ? [normalizedShape] : [...normalizedShape];
  const k = ns.length;
  const tail = input.shape.slice(input.ndim - k);
  if (k === 0 || input.ndim < k || tail.some((d, i) => d !== ns[i]))
    throw new ShapeError(
      `Given normalized_shape=${shapeStr(ns)}, expected input with shape [*, ${ns.join(", ")}], but got input of size${shapeStr(input.shape)}`,
    );
  for (const [what, t] of [
    ["weight", weight],
    ["bias", bias],
  ] as const)
    if (t && (t.ndim !== k || t.shape.some((d, i) => d !== ns[i])))
      throw new ShapeError(
        `Expected ${what} to be of same shape as normalized_shape, but got ${what} of shape ${shapeStr(t.shape)} and normalized_shape = ${shapeStr(ns)}`,
      );
  if (!input.isFloatingPoint())
    throw new DTypeError(`layerNorm(): expected a floating point input, got ${input.dtype}`);
  // one fused op (sdk/autograd/ops/norm.ts): the backend's kernel forward, a closed-form backward
  return layerNormOp(
    input,
    ns.reduce((p, d) => p * d, 1),
    weight ?? null,
    bias ?? null,
    eps,
  );
}

/**
 * Rows of `weight` ([numEmbeddings, dim]) picked by integer `input` of any
 * shape: the result is [...input.shape, dim]. The row at paddingIdx gets no
 * gradient.
 */
export function embedding(input: Tensor, weight: Tensor, paddingIdx?: number | null): Tensor {
  if (weight.ndim !== 2)
    throw new ShapeError(
      `embedding(): weight must be 2-D [numEmbeddings, embeddingDim], got shape ${shapeStr(weight.shape)}`,
    );
  const n = weight.shape[0]!;
  if (paddingIdx !== undefined && paddingIdx !== null && (paddingIdx >= n || paddingIdx < -n))
    throw new ValueError(
      `Padding_idx must be within num_embeddings (got paddingIdx=${paddingIdx} for ${n} embeddings)`,
    );
  return embeddingOp(input, weight, paddingIdx ?? undefined);
}

/** A [L, S] bool mask that is true above the diagonal: the positions a causal query must not see. */
export function causalMask(L: number, S: number = L): Tensor {
  return arange(S).unsqueeze(0).gt(arange(L).unsqueeze(1));
}

export interface AttentionOptions {
  /** Bool (true = may attend) or float (added to the scores), broadcast to [..., L, S]. */
  attnMask?: Tensor | null;
  /** Dropout on the attention weights (pass 0 in eval mode). */
  dropoutP?: number;
  /** Query i sees keys 0..i only. Not combined with attnMask. */
  isCausal?: boolean;
  /** Multiplies the scores; default 1/sqrt(E). */
  scale?: number;
  generator?: Generator;
}

/**
 * softmax(q kᵀ * scale + mask) v for q [..., L, E], k [..., S, E],
 * v [..., S, Ev], as torch's scaled_dot_product_attention (math path).
 */
export function scaledDotProductAttention(
  query: Tensor,
  key: Tensor,
  value: Tensor,
  opts: AttentionOptions = {},
): Tensor {
  if (query.ndim < 2 || key.ndim < 2 || value.ndim < 2)
    throw new ShapeError("scaledDotProductAttention(): query, key and value need at least 2 dims ([..., L, E])");
  const E_ = query.shape[query.ndim - 1]!;
  const L = query.shape[query.ndim - 2]!;
  const S = key.shape[key.ndim - 2]!;
  let att = query.matmul(key.transpose(-2, -1));
  att = opts.scale === undefined ? att.div(Math.sqrt(E_)) : att.mul(opts.scale);
  if (opts.isCausal) {
    if (opts.attnMask)
      throw new ValueError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True");
    att = att.maskedFill(causalMask(L, S), Number.NEGATIVE_INFINITY);
  } else if (opts.attnMask) {
    const m = opts.attnMask;
    att = m.dtype === "bool" ? att.maskedFill(E.logicalNot(m), Number.NEGATIVE_INFINITY) : att.add(m);
  }
  att = att.softmax(-1);
  if (opts.dropoutP) att = dropout(att, opts.dropoutP, true, opts.generator);
  return att.matmul(value);
}
