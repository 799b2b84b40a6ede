/**
 * Configuration of the GPT pieces (nanoGPT's GPTConfig, camelCased) and its
 * validation, shared by CausalSelfAttention, MLP, TransformerBlock and GPT.
 */
import { ValueError } from "../../errors/index.js";

export interface BlockConfig {
  /** Embedding width C. */
  nEmbd: number;
  /** Attention heads; must divide nEmbd. */
  nHead: number;
  /** Longest sequence (context length) the causal mask covers. */
  blockSize: number;
  /** Dropout on attention weights and residual branches (default 0). */
  dropout?: number;
  /** Biases in Linear and LayerNorm layers (default true). */
  bias?: boolean;
}

export interface GPTConfig extends BlockConfig {
  vocabSize: number;
  nLayer: number;
  /** Share the token embedding with the output head (default true, as GPT-2). */
  tieWeights?: boolean;
}

/** The config with defaults filled in; throws a ValueError naming the bad field. */
export function resolveBlockConfig(c: BlockConfig): Required<BlockConfig> {
  for (const k of ["nEmbd", "nHead", "blockSize"] as const)
    if (!Number.isInteger(c[k]) || c[k] <= 0) throw new ValueError(`${k} must be a positive integer, got ${c[k]}`);
  if (c.nEmbd % c.nHead !== 0)
    throw new ValueError(
      `nEmbd (${c.nEmbd}) must be divisible by nHead (${c.nHead}); each head gets nEmbd / nHead dims`,
    );
  const dropout = c.dropout ?? 0;
  if (!(dropout >= 0 && dropout <= 1))
    throw new ValueError(`dropout probability has to be between 0 and 1, but got ${dropout}`);
  return { nEmbd: c.nEmbd, nHead: c.nHead, blockSize: c.blockSize, dropout, bias: c.bias ?? true };
}
