/**
 * Embedding: a lookup table of `numEmbeddings` vectors of size
 * `embeddingDim`, as torch.nn.Embedding. Initialised N(0, 1), with the
 * paddingIdx row (if any) zero and excluded from gradient updates.
 */
import { ValueError } from "../../errors/index.js";
import { noGrad } from "../../autograd/grad_mode.js";
import { zeros } from "../../tensor/creation.js";
import type { Tensor } from "../../tensor/tensor.js";
import { embedding } from "../functional.js";
import { normal_ } from "../init.js";
import { Module } from "../module.js";
import { Parameter } from "../parameter.js";
import { checkSize, type FactoryOptions, factory } from "./options.js";

export interface EmbeddingOptions extends FactoryOptions {
  /** This row gets no gradient and starts at zero (negative counts from the end). */
  paddingIdx?: number | null;
}

export class Embedding extends Module<[Tensor], Tensor> {
  weight: Parameter;
  readonly paddingIdx: number | null;

  constructor(
    readonly numEmbeddings: number,
    readonly embeddingDim: number,
    opts: EmbeddingOptions = {},
  ) {
    super();
    checkSize(numEmbeddings, "numEmbeddings");
    checkSize(embeddingDim, "embeddingDim");
    const p = opts.paddingIdx ?? null;
    if (p !== null && (!Number.isInteger(p) || p >= numEmbeddings || p < -numEmbeddings))
      throw new ValueError(
        `Padding_idx must be within num_embeddings (got paddingIdx=${p} for ${numEmbeddings} embeddings)`,
      );
    this.paddingIdx = p === null ? null : p < 0 ? p + numEmbeddings : p;
    this.weight = new Parameter(zeros([numEmbeddings, embeddingDim], factory(opts)));
    this.resetParameters();
  }

  resetParameters(): void {
    normal_(this.weight);
    const p = this.paddingIdx;
    if (p !== null) noGrad(() => this.weight.select(0, p).fill_(0));
  }

  forward(input: Tensor): Tensor {
    return embedding(input, this.weight, this.paddingIdx);
  }

  override extraRepr(): string {
    return `${this.numEmbeddings}, ${this.embeddingDim}${this.paddingIdx === null ? "" : `, paddingIdx=${this.paddingIdx}`}`;
  }
}
