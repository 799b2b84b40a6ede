/**
 * MLP: the transformer block's feed-forward part, as nanoGPT's:
 * fc (C -> 4C), GELU, proj (4C -> C), dropout.
 */
import type { Tensor } from "../../tensor/tensor.js";
import { Module } from "../module.js";
import { GELU } from "../modules/activation.js";
import { Dropout } from "../modules/dropout.js";
import { Linear } from "../modules/linear.js";
import { type BlockConfig, resolveBlockConfig } from "./config.js";

export class MLP extends Module<[Tensor], Tensor> {
  fc: Linear;
  gelu: GELU;
  proj: Linear;
  dropout: Dropout;

  constructor(config: BlockConfig) {
    super();
    const c = resolveBlockConfig(config);
    this.fc = new Linear(c.nEmbd, 4 * c.nEmbd, { bias: c.bias });
    this.gelu = new GELU();
    this.proj = new Linear(4 * c.nEmbd, c.nEmbd, { bias: c.bias });
    this.dropout = new Dropout(c.dropout);
  }

  forward(x: Tensor): Tensor {
    return this.dropout.forward(this.proj.forward(this.gelu.forward(this.fc.forward(x))));
  }
}
