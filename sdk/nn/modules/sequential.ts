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
import { Module } from "../module.js";

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
    let x = input;
    for (const m of this) x = m.forward(x);
    return x;
  }
}
