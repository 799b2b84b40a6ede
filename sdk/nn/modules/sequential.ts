/**
 * Sequential: modules applied in order, each output the next input, as
 * torch.nn.Sequential. Children are named "0", "1", ..., so a state dict
 * reads "0.weight", "2.bias" as PyTorch's does.
 *
 *   const mlp = new Sequential(new Linear(2, 16), new ReLU(), new Linear(16, 1));
 *   const y = mlp.forward(x);
 */
import { IndexError } from "../../errors/index.js";
import type { Tensor } from "../../tensor/tensor.js";
import { dropping, isStock } from "../intermediates.js";
import { Module } from "../module.js";
import { GELU, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Tanh } from "./activation.js";
import { Dropout } from "./dropout.js";
import { Embedding } from "./embedding.js";
import { Identity, Linear } from "./linear.js";
import { LayerNorm } from "./normalization.js";

/** A module from tensor to tensor: what Sequential chains. */
export type TensorModule = Module<[Tensor], Tensor>;

export class Sequential extends Module<[Tensor], Tensor> implements Iterable<TensorModule> {
  #length = 0;

  constructor(...modules: TensorModule[]) {
    super();
    for (const m of modules) this.append(m);
  }

  get length(): number {
    return this.#length;
  }

  append(module: TensorModule): this {
    this.registerModule(String(this.#length), module);
    this.#length++;
    return this;
  }

  /** The module at index i (negative counts from the end). */
  at(i: number): TensorModule {
    const n = this.#length;
    if (!Number.isInteger(i) || i < -n || i >= n)
      throw new IndexError(`index ${i} is out of range for a Sequential of length ${n}`);
    return (this as unknown as Record<string, TensorModule>)[String(i < 0 ? i + n : i)]!;
  }

  *[Symbol.iterator](): Iterator<TensorModule> {
    for (let i = 0; i < this.#length; i++) yield this.at(i);
  }

  forward(input: Tensor): Tensor {
    // NB: the outputs between the layers are this forward's own when every layer is one of the SDK's,
    // which keep nothing they are given: autograd recycles them once backward is done with them
    // (sdk/nn/intermediates.ts)
    return dropping(stockChain(this), (drop) => {
      let x = input;
      const n = this.#length;
      for (let i = 0; i < n; i++) {
        x = this.at(i).forward(x);
        if (i < n - 1) drop.push(x);
      }
      return x;
    });
  }
}

/** The SDK's layers that keep nothing of their input or output beyond what autograd's graph saves. */
const STOCK_LAYERS = [
  Linear,
  Identity,
  ReLU,
  GELU,
  Tanh,
  Sigmoid,
  SiLU,
  Softmax,
  LogSoftmax,
  Dropout,
  LayerNorm,
  Embedding,
] as const;

/** Whether `s` and every layer in it (nested Sequentials too) are the SDK's own, with their own forward. */
function stockChain(s: Sequential): boolean {
  if (!isStock(s, Sequential)) return false;
  for (const m of s) {
    if (m instanceof Sequential) {
      if (!stockChain(m)) return false;
    } else if (!STOCK_LAYERS.some((cls) => isStock(m, cls))) return false;
  }
  return true;
}
