/**
 * LayerNorm over the trailing `normalizedShape` dims, as torch.nn.LayerNorm:
 * a learned elementwise scale (ones) and shift (zeros) unless
 * elementwiseAffine is false; `bias: false` drops only the shift (torch 2.1).
 */
import { ones, zeros } from "../../tensor/creation.js";
import type { Tensor } from "../../tensor/tensor.js";
import { layerNorm } from "../functional.js";
import { ones_, zeros_ } from "../init.js";
import { Module } from "../module.js";
import { Parameter } from "../parameter.js";
import { checkSize, type FactoryOptions, factory } from "./options.js";

export interface LayerNormOptions extends FactoryOptions {
  eps?: number;
  elementwiseAffine?: boolean;
  bias?: boolean;
}

export class LayerNorm extends Module<[Tensor], Tensor> {
  weight: Parameter | null;
  bias: Parameter | null;
  readonly normalizedShape: readonly number[];
  readonly eps: number;
  readonly elementwiseAffine: boolean;

  constructor(normalizedShape: number | readonly number[], opts: LayerNormOptions = {}) {
    super();
    this.normalizedShape = typeof normalizedShape === "number" ? [normalizedShape] : [...normalizedShape];
    for (const d of this.normalizedShape) checkSize(d, "normalizedShape");
    this.eps = opts.eps ?? 1e-5;
    this.elementwiseAffine = opts.elementwiseAffine ?? true;
    const f = factory(opts);
    this.weight = this.elementwiseAffine ? new Parameter(ones(this.normalizedShape, f)) : null;
    this.bias = this.elementwiseAffine && opts.bias !== false ? new Parameter(zeros(this.normalizedShape, f)) : null;
  }

  resetParameters(): void {
    if (this.weight) ones_(this.weight);
    if (this.bias) zeros_(this.bias);
  }

  forward(input: Tensor): Tensor {
    return layerNorm(input, this.normalizedShape, this.weight, this.bias, this.eps);
  }

  override extraRepr(): string {
    return `[${this.normalizedShape.join(", ")}], eps=${this.eps}, elementwiseAffine=${this.elementwiseAffine}`;
  }
}
