/**
 * A GPT block (pre-LN: x + attn(ln1(x)), x + mlp(ln2(x)), causal multi-head
 * self-attention, GELU MLP, dropout 0) and its attention alone, on every
 * backend: with the weights of scripts/gen_fixtures.py's PyTorch block loaded,
 * forward and backward (input and every parameter gradient) match PyTorch.
 */
import { afterAll, beforeEach, describe, it } from "vitest";
import { backends, FLOAT32, loadFixture, useBackend } from "./fixtures.js";
import { type ModuleCase, runModuleCase } from "./modules_table.js";

const cases = loadFixture<ModuleCase>("gpt_block.json").cases;
const defaultBackend = backends()[0]!;

/** NB: the same tolerance as single ops (rtol 1e-4, atol 1e-5), though a block chains ~10 of them. */
const BLOCK_TOLERANCE = FLOAT32;

describe.each(backends())("GPT block parity (%s backend)", (name) => {
  beforeEach(() => useBackend(name));
  afterAll(() => useBackend(defaultBackend));
  it.each(cases.map((c) => [c.name, c] as const))("%s", (_n, c) => runModuleCase(c, BLOCK_TOLERANCE));
});
