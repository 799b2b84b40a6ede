/**
 * The Tensor: a strided view (shape, strides, offset) over a Storage, plus the
 * autograd slots (requiresGrad, grad, gradFn) that sdk/autograd fills in.
 *
 * This file holds only what needs no kernels or graph: metadata, element
 * access, printing. The differentiable methods (add, matmul, view, ...) are
 * installed on the prototype by sdk/autograd/methods.ts (the same pattern as
 * tfjs's chained ops), so the tensor layer never imports autograd.
 */
import { AutogradError, DTypeError, ValueError } from "../errors/index.js";
import { type DType, type NumArray, type StorageArray, isFloating } from "./dtype.js";
import { Device } from "./device.js";
import { contiguousStrides, isContiguous, numelOf, normDim, type Shape } from "./shape.js";
import { Storage } from "./storage.js";
import { formatTensor } from "./format.js";
import { offsets, readerOf } from "./access.js";

/** What the tensor layer knows about a graph node: its name, for printing. */
export interface GradFnRef {
  readonly name: string;
}

export type GradHook = (grad: Tensor) => Tensor | undefined | void;

export type NestedArray<T> = T | NestedArray<T>[];

let nextId = 1;

/** A CPU copy of a tensor on another device; installed by ./device_copy.ts (NB: avoids an import cycle). */
let hostCopy: ((t: Tensor) => Tensor) | null = null;

/** @internal */
export function setHostCopy(f: (t: Tensor) => Tensor): void {
  hostCopy = f;
}

export class Tensor {
  /** A process-unique id (stable map keys for distributed autograd, debugging). */
  readonly id: number = nextId++;
  /**
   * @internal What .grad holds. Read it through .grad; only sdk/autograd/grad_slot.ts reads it directly,
   * for code that provably keeps nothing it reads (the engine, the optimizers' steps, zeroGrad).
   */
  gradSlot: Tensor | null = null;
  /**
   * @internal Whether gradSlot holds a gradient the autograd engine made and nothing has read through .grad
   * since: when it is dropped (zeroGrad), no one else can hold it and its buffer may be recycled.
   */
  gradUnread = false;
  /** The graph node that produced this tensor; null for leaves. */
  gradFn: GradFnRef | null = null;
  /** For views: the tensor whose storage this one shares (autograd checks in-place on views). */
  base: Tensor | null = null;
  /** Hooks run on this tensor's gradient during backward (registerHook). */
  gradHooks: GradHook[] = [];
  /** Non-leaf tensors keep their .grad when retainGrad() was called. */
  retainsGrad = false;
  private leafRequiresGrad = false;

  constructor(
    readonly storage: Storage,
    readonly shape: Shape,
    readonly strides: readonly number[],
    readonly offset = 0,
  ) {}

  /** Gradient accumulated by backward() for leaves that require grad. */
  get grad(): Tensor | null {
    // NB: whoever reads it may keep it, so its buffer is never recycled (sdk/autograd/grad_slot.ts)
    this.gradUnread = false;
    return this.gradSlot;
  }

  set grad(g: Tensor | null) {
    this.gradSlot = g;
    this.gradUnread = false;
  }

  /** A new contiguous tensor with freshly allocated (zeroed) storage. */
  static empty(shape: Shape, dtype: DType, device: Device = Device.parse("cpu")): Tensor {
    const s = Storage.alloc(dtype, numelOf(shape), device);
    return new Tensor(s, [...shape], contiguousStrides(shape), 0);
  }

  get dtype(): DType {
    return this.storage.dtype;
  }

  get device(): Device {
    return this.storage.device;
  }

  get ndim(): number {
    return this.shape.length;
  }

  dim(): number {
    return this.shape.length;
  }

  numel(): number {
    return numelOf(this.shape);
  }

  /** The full shape, or the size of one dim (negative dims count from the end). */
  size(): number[];
  size(dim: number): number;
  size(dim?: number): number[] | number {
    if (dim === undefined) return [...this.shape];
    return this.shape[normDim(dim, this.ndim)]!;
  }

  stride(): number[] {
    return [...this.strides];
  }

  isContiguous(): boolean {
    return isContiguous(this.shape, this.strides);
  }

  isFloatingPoint(): boolean {
    return isFloating(this.dtype);
  }

  get isLeaf(): boolean {
    return this.gradFn === null;
  }

  get requiresGrad(): boolean {
    return this.leafRequiresGrad || this.gradFn !== null;
  }

  set requiresGrad(v: boolean) {
    this.requiresGrad_(v);
  }

  /** Sets requiresGrad in place (leaves only), as torch's requires_grad_(). */
  /**
   * Moves this tensor's storage into shared memory, as torch's share_memory_(): every view of the
   * storage keeps its values. Sent over the shm channel to a worker on this host, such a storage
   * crosses without a copy (sdk/tensor/shared.ts). A no-op when already shared and on CUDA.
   */
  shareMemory_(): this {
    this.storage.shareMemory_();
    return this;
  }

  /** Whether this tensor's storage is in shared memory (shareMemory_, or received over shm from one). */
  isShared(): boolean {
    return this.storage.isShared;
  }

  requiresGrad_(v = true): this {
    if (!this.isLeaf)
      throw new AutogradError(
        "you can only change requiresGrad flags of leaf tensors. If you want to use a computed tensor in a " +
          "subgraph that doesn't require differentiation use y = x.detach().",
      );
    if (v && !isFloating(this.dtype))
      throw new AutogradError(`only tensors of floating point dtype can require gradients (got ${this.dtype})`);
    this.leafRequiresGrad = v;
    return this;
  }

  /** This tensor, or a CPU copy when it lives on another device (for reading values on the host). */
  private onHost(): Tensor {
    return this.storage.memory === null || hostCopy === null ? this : hostCopy(this);
  }

  /** The value of a one-element tensor as a JS number (bool tensors give 1 or 0; tolist() gives booleans). */
  item(): number {
    if (this.numel() !== 1)
      throw new ValueError(`a Tensor with ${this.numel()} elements cannot be converted to a scalar`);
    const h = this.onHost();
    return readerOf(h.storage)(h.offset);
  }

  /** Nested arrays of numbers (booleans for bool tensors), as torch's tolist(). */
  tolist(): NestedArray<number | boolean> {
    const h = this.onHost();
    const read = readerOf(h.storage);
    const offs = offsets(h.shape, h.strides, h.offset);
    const isBool = this.dtype === "bool";
    let k = 0;
    const build = (d: number): NestedArray<number | boolean> => {
      if (d === this.ndim) {
        const v = read(offs[k++]!);
        return isBool ? v !== 0 : v;
      }
      const out: NestedArray<number | boolean>[] = [];
      for (let i = 0; i < this.shape[d]!; i++) out.push(build(d + 1));
      return out;
    };
    return build(0);
  }

  /**
   * A typed-array view (no copy) of this tensor's elements; the tensor must be
   * contiguous. int64 gives a BigInt64Array, float16/bfloat16 their raw bits.
   */
  typedArray(): StorageArray {
    if (!this.isContiguous()) throw new ValueError("typedArray() needs a contiguous tensor; call .contiguous() first");
    return this.storage.data.subarray(this.offset, this.offset + this.numel());
  }

  /** The elements as plain numbers in row-major order (a copy). */
  toArray(): number[] {
    const h = this.onHost();
    const read = readerOf(h.storage);
    const offs = offsets(h.shape, h.strides, h.offset);
    const out = new Array<number>(offs.length);
    for (let i = 0; i < offs.length; i++) out[i] = read(offs[i]!);
    return out;
  }

  /** Throws a DTypeError unless this tensor has dtype `d`. */
  expectDType(d: DType, what: string): void {
    if (this.dtype !== d) throw new DTypeError(`${what}: expected dtype ${d} but got ${this.dtype}`);
  }

  toString(): string {
    return formatTensor(this, this.onHost());
  }

  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return formatTensor(this, this.onHost());
  }
}

export type { NumArray };
