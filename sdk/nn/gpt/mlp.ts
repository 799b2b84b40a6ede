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
import { dropping, isStock } from "../intermediates.js";

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
    // NB: fc's, gelu's and proj's outputs are this forward's own (sdk/nn/intermediates.ts)
    return dropping(this.stockForward(), (drop) => {
      const h = this.fc.forward(x);
      const a = this.gelu.forward(h);
      const p = this.proj.forward(a);
      drop.push(h, a, p);
      return this.dropout.forward(p);
    });
  }

  /** @internal Whether this MLP and its parts are the SDK's own (its intermediates may be recycled). */
  stockForward(): boolean {
    return (
      isStock(this, MLP) &&
      isStock(this.fc, Linear) &&
      isStock(this.gelu, GELU) &&
      isStock(this.proj, Linear) &&
      isStock(this.dropout, Dropout)
    );
  }
}
