/**
 * GPT: a small nanoGPT-style language model: token and position
 * embeddings, nLayer TransformerBlocks, a final LayerNorm and a linear head
 * (sharing the token embedding's weight by default, as GPT-2).
 *
 *   const model = new GPT({ vocabSize: 65, blockSize: 32, nLayer: 2, nHead: 2, nEmbd: 32 });
 *   const { logits, loss } = model.forward(idx, targets);   // idx, targets: int64 [B, T]
 *   loss!.backward();
 *   model.eval();
 *   const out = model.generate(prompt, 20, { temperature: 0.8, topK: 10 });
 *
 * Initialisation follows nanoGPT: weights N(0, 0.02), biases 0, and the
 * residual projections (attn.cProj, mlp.proj) N(0, 0.02 / sqrt(2 nLayer)).
 */
import { ShapeError, ValueError } from "../../errors/index.js";
import { noGrad } from "../../autograd/grad_mode.js";
import { cat } from "../../autograd/ops/views.js";
import { arange, multinomial, tensor } from "../../tensor/creation.js";
import type { Generator } from "../../tensor/random.js";
import type { Tensor } from "../../tensor/tensor.js";
import { crossEntropy } from "../functional.js";
import { normal_, zeros_ } from "../init.js";
import { Module } from "../module.js";
import { Dropout } from "../modules/dropout.js";
import { Embedding } from "../modules/embedding.js";
import { Linear } from "../modules/linear.js";
import { ModuleList } from "../modules/module_list.js";
import { LayerNorm } from "../modules/normalization.js";
import { TransformerBlock } from "./block.js";
import { type GPTConfig, resolveBlockConfig } from "./config.js";
import { dropping, isStock } from "../intermediates.js";

export interface GPTOutput {
  /** [B, T, vocabSize] */
  logits: Tensor;
  /** Mean cross entropy over targets that are not -1; null without targets. */
  loss: Tensor | null;
}

export interface GenerateOptions {
  /** Divides the logits; 0 picks the most likely token (greedy). Default 1. */
  temperature?: number;
  /** Sample only among the k most likely tokens. */
  topK?: number;
  generator?: Generator;
}

export class GPT extends Module<[Tensor, Tensor?], GPTOutput> {
  wte: Embedding;
  wpe: Embedding;
  drop: Dropout;
  blocks: ModuleList<TransformerBlock>;
  lnF: LayerNorm;
  lmHead: Linear;
  readonly config: Readonly<Required<GPTConfig>>;

  constructor(config: GPTConfig) {
    super();
    const c = resolveBlockConfig(config);
    for (const k of ["vocabSize", "nLayer"] as const)
      if (!Number.isInteger(config[k]) || config[k] <= 0)
        throw new ValueError(`${k} must be a positive integer, got ${config[k]}`);
    this.config = { ...c, vocabSize: config.vocabSize, nLayer: config.nLayer, tieWeights: config.tieWeights ?? true };
    this.wte = new Embedding(config.vocabSize, c.nEmbd);
    this.wpe = new Embedding(c.blockSize, c.nEmbd);
    this.drop = new Dropout(c.dropout);
    this.blocks = new ModuleList(Array.from({ length: config.nLayer }, () => new TransformerBlock(c)));
    this.lnF = new LayerNorm(c.nEmbd, { bias: c.bias });
    this.lmHead = new Linear(c.nEmbd, config.vocabSize, { bias: false });
    if (this.config.tieWeights) this.lmHead.weight = this.wte.weight;
    this.initWeights();
  }

  /** Re-draws every weight with nanoGPT's initialisation. */
  initWeights(): void {
    for (const m of this.modules()) {
      if (m instanceof Linear) {
        normal_(m.weight, 0, 0.02);
        if (m.bias) zeros_(m.bias);
      } else if (m instanceof Embedding) normal_(m.weight, 0, 0.02);
    }
    const residStd = 0.02 / Math.sqrt(2 * this.config.nLayer);
    for (const b of this.blocks) {
      normal_(b.attn.cProj.weight, 0, residStd);
      normal_(b.mlp.proj.weight, 0, residStd);
    }
  }

  /** The final hidden states [B, T, nEmbd] for token ids idx [B, T]. */
  #hidden(idx: Tensor): Tensor {
    if (idx.ndim !== 2) throw new ShapeError(`GPT expects token ids of shape [B, T], got [${idx.shape.join(", ")}]`);
    const T = idx.shape[1]!;
    if (T > this.config.blockSize)
      throw new ShapeError(`Cannot forward sequence of length ${T}, block size is only ${this.config.blockSize}`);
    // NB: everything made here but the result is this forward's own (sdk/nn/intermediates.ts)
    return dropping(this.#stock(), (drop) => {
      const tok = this.wte.forward(idx);
      const pos = this.wpe.forward(arange(T, undefined, 1, { device: idx.device }));
      const sum = tok.add(pos);
      let x = this.drop.forward(sum);
      drop.push(tok, pos, sum);
      for (const b of this.blocks) {
        drop.push(x);
        x = b.forward(x);
      }
      drop.push(x);
      return this.lnF.forward(x);
    });
  }

  /** Whether this GPT and all its parts are the SDK's own (its intermediates may be recycled). */
  #stock(): boolean {
    return (
      isStock(this, GPT) &&
      isStock(this.wte, Embedding) &&
      isStock(this.wpe, Embedding) &&
      isStock(this.drop, Dropout) &&
      isStock(this.blocks, ModuleList) &&
      [...this.blocks].every((b) => isStock(b, TransformerBlock) && b.stockForward()) &&
      isStock(this.lnF, LayerNorm) &&
      isStock(this.lmHead, Linear)
    );
  }

  forward(idx: Tensor, targets?: Tensor): GPTOutput {
    const stock = this.#stock();
    const logits = dropping(stock, (drop) => {
      const h = this.#hidden(idx);
      drop.push(h);
      return this.lmHead.forward(h);
    });
    if (!targets) return { logits, loss: null };
    const V = this.config.vocabSize;
    return { logits, loss: crossEntropy(logits.reshape(-1, V), targets.reshape(-1), { ignoreIndex: -1 }) };
  }

  /**
   * Appends maxNewTokens sampled tokens to idx [B, T] (int64) and returns
   * [B, T + maxNewTokens]. Runs without recording gradients; call eval()
   * first so dropout is off, as in PyTorch.
   */
  generate(idx: Tensor, maxNewTokens: number, opts: GenerateOptions = {}): Tensor {
    const temperature = opts.temperature ?? 1;
    if (!(temperature >= 0)) throw new ValueError(`temperature must be >= 0, got ${temperature}`);
    if (opts.topK !== undefined && !(Number.isInteger(opts.topK) && opts.topK > 0))
      throw new ValueError(`topK must be a positive integer, got ${opts.topK}`);
    return noGrad(() => {
      let out = idx;
      for (let i = 0; i < maxNewTokens; i++) {
        const T = out.shape[1]!;
        const ctx = T <= this.config.blockSize ? out : out.slice(1, T - this.config.blockSize);
        const logits = this.lmHead.forward(this.#hidden(ctx).select(1, -1)); // [B, V]
        let next: Tensor;
        if (temperature === 0) next = logits.argmax(-1, true);
        else {
          let l = logits.div(temperature);
          if (opts.topK !== undefined) l = keepTopK(l, opts.topK);
          next = multinomial(l.softmax(-1), 1, false, { generator: opts.generator, device: out.device });
        }
        out = cat([out, next], 1);
      }
      return out;
    });
  }
}

/** Logits [B, V] with everything below each row's k-th largest value set to -inf. */
function keepTopK(logits: Tensor, k: number): Tensor {
  const [B, V] = logits.shape as [number, number];
  const vals = logits.toArray();
  const kk = Math.min(k, V);
  const thresholds: number[][] = [];
  for (let r = 0; r < B; r++) {
    const row = vals.slice(r * V, (r + 1) * V).sort((a, b) => b - a);
    thresholds.push([row[kk - 1]!]);
  }
  return logits.maskedFill(
    logits.lt(tensor(thresholds, { dtype: logits.dtype, device: logits.device })),
    Number.NEGATIVE_INFINITY,
  );
}
