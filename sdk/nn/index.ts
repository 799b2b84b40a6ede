/**
 * tprpc's nn: the Module system, layers, losses, initialisation and a small
 * GPT, as torch.nn. Exported from "tprpc" as `nn`:
 *
 *   import { nn, randn } from "tprpc";
 *   const model = new nn.Sequential(new nn.Linear(4, 16), new nn.ReLU(), new nn.Linear(16, 2));
 *   const loss = nn.functional.crossEntropy(model.forward(randn([8, 4])), targets);
 */
export { Module, type AnyModule, type LoadStateDictResult } from "./module.js";
export { Parameter } from "./parameter.js";
export * as functional from "./functional.js";
export * as init from "./init.js";
export type { Reduction, WeightedLossOptions, CrossEntropyOptions, BCEWithLogitsOptions } from "./losses.js";
export type { AttentionOptions } from "./functional.js";
export type { FactoryOptions } from "./modules/options.js";

export { Linear, Identity, type LinearOptions } from "./modules/linear.js";
export { Embedding, type EmbeddingOptions } from "./modules/embedding.js";
export { LayerNorm, type LayerNormOptions } from "./modules/normalization.js";
export { Dropout } from "./modules/dropout.js";
export { ReLU, GELU, Tanh, Sigmoid, SiLU, Softmax, LogSoftmax } from "./modules/activation.js";
export { Sequential, type TensorModule } from "./modules/sequential.js";
export { ModuleList } from "./modules/module_list.js";
export { MSELoss, NLLLoss, CrossEntropyLoss, BCEWithLogitsLoss } from "./modules/loss.js";

export type { BlockConfig, GPTConfig } from "./gpt/config.js";
export { CausalSelfAttention } from "./gpt/attention.js";
export { MLP } from "./gpt/mlp.js";
export { TransformerBlock } from "./gpt/block.js";
export { GPT, type GPTOutput, type GenerateOptions } from "./gpt/gpt.js";
