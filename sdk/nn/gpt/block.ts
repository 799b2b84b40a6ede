/**
 * TransformerBlock: a pre-LayerNorm GPT block,
 *
 *   x = x + attn(ln1(x));  x = x + mlp(ln2(x))
 *
 * with state dict keys ln1.*, attn.cAttn.*, attn.cProj.*, ln2.*, mlp.fc.*,
 * mlp.proj.* (those of the PyTorch reference in scripts/gen_fixtures.py).
 */
import type { Tensor } from "../../tensor/tensor.js";
import { Module } from "../module.js";
import { LayerNorm } from "../modules/normalization.js";
import { CausalSelfAttention } from "./attention.js";
import { type BlockConfig, resolveBlockConfig } from "./config.js";
import { MLP } from "./mlp.js";
import { dropping, isStock } from "../intermediates.js";

export class TransformerBlock extends Module<[Tensor], Tensor> {
  ln1: LayerNorm;
  attn: CausalSelfAttention;
  ln2: LayerNorm;
  mlp: MLP;

  constructor(config: BlockConfig) {
    super();
    const c = resolveBlockConfig(config);
    this.ln1 = new LayerNorm(c.nEmbd, { bias: c.bias });
    this.attn = new CausalSelfAttention(c);
    this.ln2 = new LayerNorm(c.nEmbd, { bias: c.bias });
    this.mlp = new MLP(c);
  }

  forward(x: Tensor): Tensor {
    // NB: everything made here but the result is this forward's own (sdk/nn/intermediates.ts)
    return dropping(this.stockForward(), (drop) => {
      const n1 = this.ln1.forward(x);
      const a = this.attn.forward(n1);
      const h = x.add(a);
      const n2 = this.ln2.forward(h);
      const m = this.mlp.forward(n2);
      drop.push(n1, a, h, n2, m);
      return h.add(m);
    });
  }

  /** @internal Whether this block and all its parts are the SDK's own (its intermediates may be recycled). */
  stockForward(): boolean {
    return (
      isStock(this, TransformerBlock) &&
      isStock(this.ln1, LayerNorm) &&
      isStock(this.ln2, LayerNorm) &&
      isStock(this.attn, CausalSelfAttention) &&
      this.attn.stockForward() &&
      isStock(this.mlp, MLP) &&
      this.mlp.stockForward()
    );
  }
}
