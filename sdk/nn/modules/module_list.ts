/**
 * ModuleList: an indexable list of submodules, as torch.nn.ModuleList. Its
 * children are named by position ("0", "1", ...), so a model's parameters
 * read "blocks.0.attn.cAttn.weight". It has no forward: iterate over it.
 *
 *   this.blocks = new ModuleList(Array.from({ length: n }, () => new TransformerBlock(cfg)));
 *   for (const b of this.blocks) x = b.forward(x);
 */
import { IndexError, NotImplementedError } from "../../errors/index.js";
import { type AnyModule, Module } from "../module.js";

export class ModuleList<M extends AnyModule = AnyModule> extends Module<[], never> implements Iterable<M> {
  #length = 0;

  constructor(modules: Iterable<M> = []) {
    super();
    for (const m of modules) this.push(m);
  }

  get length(): number {
    return this.#length;
  }

  /** Appends a module; returns this (as torch's append). */
  push(module: M): this {
    this.registerModule(String(this.#length), module);
    this.#length++;
    return this;
  }

  append(module: M): this {
    return this.push(module);
  }

  extend(modules: Iterable<M>): this {
    for (const m of modules) this.push(m);
    return this;
  }

  /** The module at index i (negative counts from the end). */
  at(i: number): M {
    const n = this.#length;
    if (!Number.isInteger(i) || i < -n || i >= n)
      throw new IndexError(`index ${i} is out of range for a ModuleList of length ${n}`);
    return (this as unknown as Record<string, M>)[String(i < 0 ? i + n : i)]!;
  }

  *[Symbol.iterator](): Iterator<M> {
    for (let i = 0; i < this.#length; i++) yield this.at(i);
  }

  forward(): never {
    throw new NotImplementedError("ModuleList has no forward(); iterate over it and call each module's forward()");
  }
}
