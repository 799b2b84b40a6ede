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
    const h = x.add(this.attn.forward(this.ln1.forward(x)));
    return h.add(this.mlp.forward(this.ln2.forward(h)));
  }
}
