/**
 * Installs the differentiable ops as Tensor methods (x.add(y), x.matmul(w),
 * x.sum(1, true), ...) and declares them on the Tensor type by module
 * augmentation, as tfjs does for its chained ops. Importing sdk/autograd
 * (or "tprpc") runs this once.
 */
import { AutogradError, DTypeError, DeviceError } from "../errors/index.js";
import { type DType, DTYPES, isFloating } from "../tensor/dtype.js";
import { Device, type DeviceLike } from "../tensor/device.js";
import { toDevice } from "../tensor/device_copy.js";
import { defaultGenerator, type Generator } from "../tensor/random.js";
import * as raw from "../tensor/raw.js";
import { Tensor, type GradHook } from "../tensor/tensor.js";
import { backward } from "./engine.js";
import { record } from "./function.js";
import { inplace } from "./inplace.js";
import type { Node } from "./node.js";
import * as E from "./ops/elementwise.js";
import * as I from "./ops/indexing.js";
import * as L from "./ops/linalg.js";
import * as R from "./ops/reduce.js";
import * as V from "./ops/views.js";

type Operand = Tensor | number | boolean;
type Dims = number | readonly number[] | undefined;

declare module "../tensor/tensor.js" {
  interface Tensor {
    add(other: Operand, alpha?: number): Tensor;
    sub(other: Operand, alpha?: number): Tensor;
    mul(other: Operand): Tensor;
    div(other: Operand): Tensor;
    pow(exponent: Operand): Tensor;
    neg(): Tensor;
    exp(): Tensor;
    log(): Tensor;
    log1p(): Tensor;
    expm1(): Tensor;
    sqrt(): Tensor;
    rsqrt(): Tensor;
    abs(): Tensor;
    sign(): Tensor;
    square(): Tensor;
    reciprocal(): Tensor;
    tanh(): Tensor;
    sigmoid(): Tensor;
    relu(): Tensor;
    gelu(opts?: { approximate?: "none" | "tanh" }): Tensor;
    erf(): Tensor;
    sin(): Tensor;
    cos(): Tensor;
    floor(): Tensor;
    ceil(): Tensor;
    round(): Tensor;
    clamp(min?: number | null, max?: number | null): Tensor;
    maximum(other: Tensor): Tensor;
    minimum(other: Tensor): Tensor;
    maskedFill(mask: Tensor, value: number | Tensor): Tensor;
    eq(other: Operand): Tensor;
    ne(other: Operand): Tensor;
    lt(other: Operand): Tensor;
    le(other: Operand): Tensor;
    gt(other: Operand): Tensor;
    ge(other: Operand): Tensor;
    logicalAnd(other: Operand): Tensor;
    logicalOr(other: Operand): Tensor;
    logicalNot(): Tensor;
    isnan(): Tensor;

    sum(dims?: Dims, keepdim?: boolean): Tensor;
    mean(dims?: Dims, keepdim?: boolean): Tensor;
    var(dims?: Dims, opts?: { correction?: number; keepdim?: boolean }): Tensor;
    std(dims?: Dims, opts?: { correction?: number; keepdim?: boolean }): Tensor;
    max(): Tensor;
    max(dim: number, keepdim?: boolean): R.ValuesIndices;
    min(): Tensor;
    min(dim: number, keepdim?: boolean): R.ValuesIndices;
    amax(dims?: Dims, keepdim?: boolean): Tensor;
    argmax(dim?: number, keepdim?: boolean): Tensor;
    argmin(dim?: number, keepdim?: boolean): Tensor;
    logsumexp(dims: Dims, keepdim?: boolean): Tensor;
    prod(dim?: number, keepdim?: boolean): Tensor;

    matmul(other: Tensor): Tensor;
    mm(other: Tensor): Tensor;
    bmm(other: Tensor): Tensor;
    softmax(dim: number): Tensor;
    logSoftmax(dim: number): Tensor;

    view(...shape: number[]): Tensor;
    view(shape: readonly number[]): Tensor;
    reshape(...shape: number[]): Tensor;
    reshape(shape: readonly number[]): Tensor;
    flatten(startDim?: number, endDim?: number): Tensor;
    permute(...dims: number[]): Tensor;
    permute(dims: readonly number[]): Tensor;
    transpose(dim0: number, dim1: number): Tensor;
    t(): Tensor;
    /** torch's .mT: the last two dims swapped. */
    readonly mT: Tensor;
    narrow(dim: number, start: number, length: number): Tensor;
    select(dim: number, index: number): Tensor;
    slice(dim: number, start?: number, end?: number, step?: number): Tensor;
    expand(...shape: number[]): Tensor;
    expand(shape: readonly number[]): Tensor;
    expandAs(other: Tensor): Tensor;
    squeeze(dim?: number): Tensor;
    unsqueeze(dim: number): Tensor;
    contiguous(): Tensor;
    clone(): Tensor;
    detach(): Tensor;
    split(sizeOrSections: number | readonly number[], dim?: number): Tensor[];
    chunk(chunks: number, dim?: number): Tensor[];
    indexSelect(dim: number, index: Tensor): Tensor;
    gather(dim: number, index: Tensor): Tensor;
    scatterAdd(dim: number, index: Tensor, src: Tensor): Tensor;

    /**
     * Casts (float to float stays differentiable) or moves to a device ("cpu", "cuda:1", 1, a Device;
     * differentiable: the gradient moves back). A CUDA device without a viable CUDA backend is a DeviceError.
     */
    to(dtypeOrDevice: DType | DeviceLike): Tensor;
    float(): Tensor;
    double(): Tensor;
    long(): Tensor;
    int(): Tensor;
    bool(): Tensor;
    half(): Tensor;
    bfloat16(): Tensor;
    cpu(): Tensor;
    /** A copy on CUDA device `device` (default cuda:0), as torch's .cuda(); DeviceError where CUDA is not viable. */
    cuda(device?: number | string | Device): Tensor;

    backward(gradient?: Tensor, retainGraph?: boolean): void;
    /** Runs hook(grad) when this tensor's gradient is computed; a returned tensor replaces it. Returns a remover. */
    registerHook(hook: GradHook): { remove(): void };
    /** Keeps .grad on a non-leaf tensor after backward. */
    retainGrad(): void;
    detach_(): Tensor;

    add_(other: Operand, alpha?: number): Tensor;
    sub_(other: Operand, alpha?: number): Tensor;
    mul_(other: Operand): Tensor;
    div_(other: Operand): Tensor;
    pow_(exponent: Operand): Tensor;
    neg_(): Tensor;
    exp_(): Tensor;
    sqrt_(): Tensor;
    tanh_(): Tensor;
    sigmoid_(): Tensor;
    relu_(): Tensor;
    clamp_(min?: number | null, max?: number | null): Tensor;
    maskedFill_(mask: Tensor, value: number | Tensor): Tensor;
    /** self += value * t1 * t2 */
    addcmul_(t1: Tensor, t2: Tensor, value?: number): Tensor;
    /** self += value * t1 / t2 */
    addcdiv_(t1: Tensor, t2: Tensor, value?: number): Tensor;
    /** self = self + weight * (end - self) */
    lerp_(end: Tensor, weight: number): Tensor;
    copy_(src: Tensor | number): Tensor;
    fill_(value: number): Tensor;
    zero_(): Tensor;
    uniform_(low?: number, high?: number, generator?: Generator): Tensor;
    normal_(mean?: number, std?: number, generator?: Generator): Tensor;
  }
}

const shapeArgs = (args: (number | readonly number[])[]): number[] =>
  args.length === 1 && Array.isArray(args[0]) ? [...(args[0] as number[])] : (args as number[]);

const P = Tensor.prototype;

Object.assign(P, {
  add(this: Tensor, o: Operand, alpha?: number) {
    return E.add(this, o, alpha);
  },
  sub(this: Tensor, o: Operand, alpha?: number) {
    return E.sub(this, o, alpha);
  },
  mul(this: Tensor, o: Operand) {
    return E.mul(this, o);
  },
  div(this: Tensor, o: Operand) {
    return E.div(this, o);
  },
  pow(this: Tensor, o: Operand) {
    return E.pow(this, o);
  },
  neg(this: Tensor) {
    return E.neg(this);
  },
  exp(this: Tensor) {
    return E.exp(this);
  },
  log(this: Tensor) {
    return E.log(this);
  },
  log1p(this: Tensor) {
    return E.log1p(this);
  },
  expm1(this: Tensor) {
    return E.expm1(this);
  },
  sqrt(this: Tensor) {
    return E.sqrt(this);
  },
  rsqrt(this: Tensor) {
    return E.rsqrt(this);
  },
  abs(this: Tensor) {
    return E.abs(this);
  },
  sign(this: Tensor) {
    return E.sign(this);
  },
  square(this: Tensor) {
    return E.square(this);
  },
  reciprocal(this: Tensor) {
    return E.reciprocal(this);
  },
  tanh(this: Tensor) {
    return E.tanh(this);
  },
  sigmoid(this: Tensor) {
    return E.sigmoid(this);
  },
  relu(this: Tensor) {
    return E.relu(this);
  },
  gelu(this: Tensor, opts?: { approximate?: "none" | "tanh" }) {
    return E.gelu(this, opts);
  },
  erf(this: Tensor) {
    return E.erf(this);
  },
  sin(this: Tensor) {
    return E.sin(this);
  },
  cos(this: Tensor) {
    return E.cos(this);
  },
  floor(this: Tensor) {
    return E.floor(this);
  },
  ceil(this: Tensor) {
    return E.ceil(this);
  },
  round(this: Tensor) {
    return E.round(this);
  },
  clamp(this: Tensor, lo?: number | null, hi?: number | null) {
    return E.clamp(this, lo, hi);
  },
  maximum(this: Tensor, o: Tensor) {
    return E.maximum(this, o);
  },
  minimum(this: Tensor, o: Tensor) {
    return E.minimum(this, o);
  },
  maskedFill(this: Tensor, m: Tensor, v: number | Tensor) {
    return E.maskedFill(this, m, v);
  },
  eq(this: Tensor, o: Operand) {
    return E.eq(this, o);
  },
  ne(this: Tensor, o: Operand) {
    return E.ne(this, o);
  },
  lt(this: Tensor, o: Operand) {
    return E.lt(this, o);
  },
  le(this: Tensor, o: Operand) {
    return E.le(this, o);
  },
  gt(this: Tensor, o: Operand) {
    return E.gt(this, o);
  },
  ge(this: Tensor, o: Operand) {
    return E.ge(this, o);
  },
  logicalAnd(this: Tensor, o: Operand) {
    return E.logicalAnd(this, o);
  },
  logicalOr(this: Tensor, o: Operand) {
    return E.logicalOr(this, o);
  },
  logicalNot(this: Tensor) {
    return E.logicalNot(this);
  },
  isnan(this: Tensor) {
    return E.isnan(this);
  },

  sum(this: Tensor, d?: Dims, k?: boolean) {
    return R.sum(this, d, k);
  },
  mean(this: Tensor, d?: Dims, k?: boolean) {
    return R.mean(this, d, k);
  },
  var(this: Tensor, d?: Dims, o?: { correction?: number; keepdim?: boolean }) {
    return R.variance(this, d, o);
  },
  std(this: Tensor, d?: Dims, o?: { correction?: number; keepdim?: boolean }) {
    return R.std(this, d, o);
  },
  max(this: Tensor, dim?: number, k?: boolean) {
    return dim === undefined ? R.max(this) : R.max(this, dim, k);
  },
  min(this: Tensor, dim?: number, k?: boolean) {
    return dim === undefined ? R.min(this) : R.min(this, dim, k);
  },
  amax(this: Tensor, d?: Dims, k?: boolean) {
    return R.amax(this, d, k);
  },
  argmax(this: Tensor, d?: number, k?: boolean) {
    return R.argmax(this, d, k);
  },
  argmin(this: Tensor, d?: number, k?: boolean) {
    return R.argmin(this, d, k);
  },
  logsumexp(this: Tensor, d: Dims, k?: boolean) {
    return R.logsumexp(this, d, k);
  },
  prod(this: Tensor, d?: number, k?: boolean) {
    return R.prod(this, d, k);
  },

  matmul(this: Tensor, o: Tensor) {
    return L.matmul(this, o);
  },
  mm(this: Tensor, o: Tensor) {
    return L.mm(this, o);
  },
  bmm(this: Tensor, o: Tensor) {
    return L.bmm(this, o);
  },
  softmax(this: Tensor, d: number) {
    return I.softmax(this, d);
  },
  logSoftmax(this: Tensor, d: number) {
    return I.logSoftmax(this, d);
  },

  view(this: Tensor, ...s: (number | readonly number[])[]) {
    return V.view(this, shapeArgs(s));
  },
  reshape(this: Tensor, ...s: (number | readonly number[])[]) {
    return V.reshape(this, shapeArgs(s));
  },
  flatten(this: Tensor, a?: number, b?: number) {
    return V.flatten(this, a, b);
  },
  permute(this: Tensor, ...d: (number | readonly number[])[]) {
    return V.permute(this, shapeArgs(d));
  },
  transpose(this: Tensor, a: number, b: number) {
    return V.transpose(this, a, b);
  },
  t(this: Tensor) {
    return V.t(this);
  },
  narrow(this: Tensor, d: number, s: number, l: number) {
    return V.narrow(this, d, s, l);
  },
  select(this: Tensor, d: number, i: number) {
    return V.select(this, d, i);
  },
  slice(this: Tensor, d: number, s?: number, e?: number, st?: number) {
    return V.slice(this, d, s, e, st);
  },
  expand(this: Tensor, ...s: (number | readonly number[])[]) {
    return V.expand(this, shapeArgs(s));
  },
  expandAs(this: Tensor, o: Tensor) {
    return V.expand(this, o.shape);
  },
  squeeze(this: Tensor, d?: number) {
    return V.squeeze(this, d);
  },
  unsqueeze(this: Tensor, d: number) {
    return V.unsqueeze(this, d);
  },
  contiguous(this: Tensor) {
    return V.contiguous(this);
  },
  clone(this: Tensor) {
    return V.clone(this);
  },
  detach(this: Tensor) {
    return V.detach(this);
  },
  split(this: Tensor, s: number | readonly number[], d?: number) {
    return V.split(this, s, d);
  },
  chunk(this: Tensor, c: number, d?: number) {
    return V.chunk(this, c, d);
  },
  indexSelect(this: Tensor, d: number, i: Tensor) {
    return I.indexSelect(this, d, i);
  },
  gather(this: Tensor, d: number, i: Tensor) {
    return I.gather(this, d, i);
  },
  scatterAdd(this: Tensor, d: number, i: Tensor, s: Tensor) {
    return I.scatterAdd(this, d, i, s);
  },

  to(this: Tensor, target: DType | DeviceLike) {
    if (typeof target !== "string" || !(DTYPES as readonly string[]).includes(target)) {
      const dev = Device.parse(target);
      const from = this.device;
      const out = toDevice(this, dev);
      if (out === this) return out;
      return record("ToCopyBackward0", out, [this], (g) => [toDevice(g, from)]);
    }
    return V.toDType(this, target as DType);
  },
  float(this: Tensor) {
    return V.toDType(this, "float32");
  },
  double(this: Tensor) {
    return V.toDType(this, "float64");
  },
  long(this: Tensor) {
    return V.toDType(this, "int64");
  },
  int(this: Tensor) {
    return V.toDType(this, "int32");
  },
  bool(this: Tensor) {
    return V.toDType(this, "bool");
  },
  half(this: Tensor) {
    return V.toDType(this, "float16");
  },
  bfloat16(this: Tensor) {
    return V.toDType(this, "bfloat16");
  },
  cpu(this: Tensor) {
    return this.to("cpu");
  },
  cuda(this: Tensor, device: number | string | Device = 0) {
    const d = Device.parse(device);
    if (d.type !== "cuda") throw new DeviceError(`cuda() expects a CUDA device (an index or "cuda:N"), got '${d}'`);
    return this.to(d);
  },

  backward(this: Tensor, gradient?: Tensor, retainGraph?: boolean) {
    backward(this, gradient, retainGraph);
  },
  registerHook(this: Tensor, hook: GradHook) {
    if (!this.requiresGrad) throw new AutogradError("cannot register a hook on a tensor that doesn't require gradient");
    const list = this.isLeaf ? this.gradHooks : (this.gradFn as Node).outputHooks;
    list.push(hook);
    return {
      remove: () => {
        const i = list.indexOf(hook);
        if (i >= 0) list.splice(i, 1);
      },
    };
  },
  retainGrad(this: Tensor) {
    if (this.isLeaf) return;
    (this.gradFn as Node).retainGradOf = new WeakRef(this);
    this.retainsGrad = true;
  },
  detach_(this: Tensor) {
    this.gradFn = null;
    this.requiresGrad_(false);
    return this;
  },

  add_(this: Tensor, o: Operand, alpha?: number) {
    return inplace(this, () => E.add(this, o, alpha));
  },
  sub_(this: Tensor, o: Operand, alpha?: number) {
    return inplace(this, () => E.sub(this, o, alpha));
  },
  mul_(this: Tensor, o: Operand) {
    return inplace(this, () => E.mul(this, o));
  },
  div_(this: Tensor, o: Operand) {
    return inplace(this, () => E.div(this, o));
  },
  pow_(this: Tensor, o: Operand) {
    return inplace(this, () => E.pow(this, o));
  },
  neg_(this: Tensor) {
    return inplace(this, () => E.neg(this));
  },
  exp_(this: Tensor) {
    return inplace(this, () => E.exp(this));
  },
  sqrt_(this: Tensor) {
    return inplace(this, () => E.sqrt(this));
  },
  tanh_(this: Tensor) {
    return inplace(this, () => E.tanh(this));
  },
  sigmoid_(this: Tensor) {
    return inplace(this, () => E.sigmoid(this));
  },
  relu_(this: Tensor) {
    return inplace(this, () => E.relu(this));
  },
  clamp_(this: Tensor, lo?: number | null, hi?: number | null) {
    return inplace(this, () => E.clamp(this, lo, hi));
  },
  maskedFill_(this: Tensor, m: Tensor, v: number | Tensor) {
    return inplace(this, () => E.maskedFill(this, m, v));
  },
  addcmul_(this: Tensor, a: Tensor, b: Tensor, value = 1) {
    return inplace(this, () => E.add(this, E.mul(a, b), value));
  },
  addcdiv_(this: Tensor, a: Tensor, b: Tensor, value = 1) {
    return inplace(this, () => E.add(this, E.div(a, b), value));
  },
  lerp_(this: Tensor, end: Tensor, w: number) {
    return inplace(this, () => E.add(this, E.sub(end, this), w));
  },
  copy_(this: Tensor, src: Tensor | number) {
    return inplace(this, () =>
      src instanceof Tensor
        ? V.expand(V.toDType(src, this.dtype), this.shape)
        : raw.binary("add", raw.empty(this.shape, this.dtype), src),
    );
  },
  fill_(this: Tensor, v: number) {
    return inplace(this, () => filled(this, v));
  },
  zero_(this: Tensor) {
    return inplace(this, () => filled(this, 0));
  },
  uniform_(this: Tensor, low = 0, high = 1, g: Generator = defaultGenerator) {
    return fillRandom(this, () => low + (high - low) * g.random());
  },
  normal_(this: Tensor, mean = 0, std = 1, g: Generator = defaultGenerator) {
    return fillRandom(this, () => mean + std * g.normal());
  },
});

Object.defineProperty(P, "mT", {
  get(this: Tensor) {
    return V.transpose(this, -2, -1);
  },
});

function filled(t: Tensor, v: number): Tensor {
  const out = raw.empty(t.shape, t.dtype);
  raw.copyInto(out, v);
  return out;
}

function fillRandom(t: Tensor, draw: () => number): Tensor {
  if (!isFloating(t.dtype)) throw new DTypeError(`random fill expects a floating point tensor, got ${t.dtype}`);
  return inplace(t, () => {
    const vals = raw.empty(t.shape, "float64");
    const data = vals.storage.data as Float64Array;
    for (let i = 0; i < data.length; i++) data[i] = draw();
    return raw.cast(vals, t.dtype);
  });
}
