/**
 * Dropout, as torch.nn.Dropout: in train mode zeroes elements with
 * probability p and scales the rest by 1/(1-p); in eval mode the identity.
 * Switch with module.train() / module.eval().
 */
import { ValueError } from "../../errors/index.js";
import type { Tensor } from "../../tensor/tensor.js";
import { dropout } from "../functional.js";
import { Module } from "../module.js";

export class Dropout extends Module<[Tensor], Tensor> {
  constructor(readonly p = 0.5) {
    super();
    if (!(p >= 0 && p <= 1)) throw new ValueError(`dropout probability has to be between 0 and 1, but got ${p}`);
  }

  forward(input: Tensor): Tensor {
    return dropout(input, this.p, this.training);
  }

  override extraRepr(): string {
    return `p=${this.p}`;
  }
}
