/**
 * CausalSelfAttention: nanoGPT-style multi-head self-attention in which
 * position t attends to positions 0..t only.
 *
 * forward(x [B, T, C]):
 * 1. q, k, v = cAttn(x) split in three along C (computed as three products with
 *    thirds of cAttn's weight and bias: the same numbers, a cheaper backward);
 * 2. each reshaped to heads: [B, nHead, T, C / nHead];
 * 3. softmax(q kᵀ / sqrt(hs), future masked to -inf), dropout, times v;
 * 4. heads merged back to [B, T, C], then cProj and residual dropout.
 *
 * The causal mask is a non-persistent buffer, so the state dict holds only
 * cAttn.{weight,bias} and cProj.{weight,bias}, as the PyTorch reference.
 */
import { ShapeError } from "../../errors/index.js";
import type { Tensor } from "../../tensor/tensor.js";
import { maskedSoftmax } from "../../autograd/ops/indexing.js";
import { causalMask, linear } from "../functional.js";
import { Module } from "../module.js";
import { Dropout } from "../modules/dropout.js";
import { Linear } from "../modules/linear.js";
import { type BlockConfig, resolveBlockConfig } from "./config.js";
import { dropping, isStock } from "../intermediates.js";

export class CausalSelfAttention extends Module<[Tensor], Tensor> {
  cAttn: Linear;
  cProj: Linear;
  attnDropout: Dropout;
  residDropout: Dropout;
  /** [blockSize, blockSize], true where a query may attend (lower triangle). */
  declare mask: Tensor;
  readonly nEmbd: number;
  readonly nHead: number;
  readonly blockSize: number;

  constructor(config: BlockConfig) {
    super();
    const c = resolveBlockConfig(config);
    this.nEmbd = c.nEmbd;
    this.nHead = c.nHead;
    this.blockSize = c.blockSize;
    this.cAttn = new Linear(c.nEmbd, 3 * c.nEmbd, { bias: c.bias });
    this.cProj = new Linear(c.nEmbd, c.nEmbd, { bias: c.bias });
    this.attnDropout = new Dropout(c.dropout);
    this.residDropout = new Dropout(c.dropout);
    this.registerBuffer("mask", causalMask(c.blockSize).logicalNot(), false);
  }

  forward(x: Tensor): Tensor {
    if (x.ndim !== 3 || x.shape[2] !== this.nEmbd)
      throw new ShapeError(
        `CausalSelfAttention expects input of shape [B, T, ${this.nEmbd}], got [${x.shape.join(", ")}]`,
      );
    const [B, T, C] = x.shape as [number, number, number];
    if (T > this.blockSize)
      throw new ShapeError(`Cannot forward sequence of length ${T}, block size is only ${this.blockSize}`);
    const hs = C / this.nHead;
    // NB: q, k and v each come from their third of cAttn's weight and bias (the same numbers as
    // splitting cAttn(x)): the backward then assembles [3C, C] weight slices, not three zero-filled
    // [B, T, 3C] activation gradients.
    const { weight, bias } = this.cAttn;
    const project = (i: number): Tensor =>
      linear(x, weight.narrow(0, i * C, C), bias ? bias.narrow(0, i * C, C) : null)
        .view(B, T, this.nHead, hs)
        .transpose(1, 2);
    // NB: everything made here but the result is this forward's own (sdk/nn/intermediates.ts)
    return dropping(this.stockForward(), (drop) => {
      const [q, k, v] = [project(0), project(1), project(2)];
      // softmax(q kᵀ / sqrt(hs), future masked to -inf), as scaledDotProductAttention's math path
      // (one fused op: the same numbers as .div(sqrt(hs)).maskedFill(future, -inf).softmax(-1))
      const scores = q.matmul(k.transpose(-2, -1));
      const probs = maskedSoftmax(scores, this.#future(T), Math.sqrt(hs));
      const att = this.attnDropout.forward(probs);
      const y = att.matmul(v);
      const merged = y.transpose(1, 2).contiguous().view(B, T, C);
      const out = this.cProj.forward(merged);
      drop.push(q, k, v, scores, probs, att, y, merged, out);
      return this.residDropout.forward(out);
    });
  }

  /** @internal Whether this attention and its parts are the SDK's own (its intermediates may be recycled). */
  stockForward(): boolean {
    return (
      isStock(this, CausalSelfAttention) &&
      isStock(this.cProj, Linear) &&
      isStock(this.attnDropout, Dropout) &&
      isStock(this.residDropout, Dropout)
    );
  }

  #futureCache: { mask: Tensor; T: number; future: Tensor } | null = null;

  /** [T, T], true above the diagonal (the positions a query must not see): the mask buffer inverted, cached. */
  #future(T: number): Tensor {
    const c = this.#futureCache;
    if (c && c.mask === this.mask && c.T === T) return c.future;
    const future = this.mask.slice(0, 0, T).slice(1, 0, T).logicalNot();
    this.#futureCache = { mask: this.mask, T, future };
    return future;
  }

  override extraRepr(): string {
    return `nHead=${this.nHead}, blockSize=${this.blockSize}`;
  }
}
