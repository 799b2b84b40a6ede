/**
 * Linear (y = x Wᵀ + b) and Identity, as torch.nn.Linear / nn.Identity.
 * Linear's default initialisation is PyTorch's: W ~ kaimingUniform(a=√5),
 * i.e. U(-1/√in, 1/√in), and b ~ U(-1/√in, 1/√in).
 */
import { zeros } from "../../tensor/creation.js";
import type { Tensor } from "../../tensor/tensor.js";
import { linear } from "../functional.js";
import { kaimingUniform_, uniform_ } from "../init.js";
import { Module } from "../module.js";
import { Parameter } from "../parameter.js";
import { checkSize, type FactoryOptions, factory } from "./options.js";

export interface LinearOptions extends FactoryOptions {
  /** Learn an additive bias (default true). */
  bias?: boolean;
}

export class Linear extends Module<[Tensor], Tensor> {
  weight: Parameter;
  bias: Parameter | null;

  constructor(
    readonly inFeatures: number,
    readonly outFeatures: number,
    opts: LinearOptions = {},
  ) {
    super();
    checkSize(inFeatures, "inFeatures");
    checkSize(outFeatures, "outFeatures");
    this.weight = new Parameter(zeros([outFeatures, inFeatures], factory(opts)));
    this.bias = opts.bias === false ? null : new Parameter(zeros([outFeatures], factory(opts)));
    this.resetParameters();
  }

  /** Re-draws the weights with PyTorch's default initialisation. */
  resetParameters(): void {
    kaimingUniform_(this.weight, { a: Math.sqrt(5) });
    if (this.bias) {
      const bound = this.inFeatures > 0 ? 1 / Math.sqrt(this.inFeatures) : 0;
      uniform_(this.bias, -bound, bound);
    }
  }

  forward(input: Tensor): Tensor {
    return linear(input, this.weight, this.bias);
  }

  override extraRepr(): string {
    return `inFeatures=${this.inFeatures}, outFeatures=${this.outFeatures}, bias=${this.bias !== null}`;
  }
}

/** Returns its input unchanged (a placeholder layer). */
export class Identity extends Module<[Tensor], Tensor> {
  forward(input: Tensor): Tensor {
    return input;
  }
}
