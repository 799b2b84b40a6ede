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
import { recordOp } from "./function.js";
import { directBinary, directFill, inplace } from "./inplace.js";
import type { Node } from "./node.js";
import * as elementwise from "./ops/elementwise.js";
import * as indexing from "./ops/indexing.js";
import * as linalg from "./ops/linalg.js";
import * as reduce from "./ops/reduce.js";
import * as views from "./ops/views.js";

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
    max(dim: number, keepdim?: boolean): reduce.ValuesIndices;
    min(): Tensor;
    min(dim: number, keepdim?: boolean): reduce.ValuesIndices;
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
    to(dtypeOrDevice: DType | DeviceLike, options?: { nonBlocking?: boolean }): Tensor;
    float(): Tensor;
    double(): Tensor;
    long(): Tensor;
    int(): Tensor;
    bool(): Tensor;
    half(): Tensor;
    bfloat16(): Tensor;
    cpu(): Tensor;
    /** A copy on CUDA device `device` (default cuda:0), as torch's .cuda(); DeviceError where CUDA is not viable. */
    cuda(device?: number | string | Device, options?: { nonBlocking?: boolean }): Tensor;

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

const proto = Tensor.prototype;

Object.assign(proto, {
  add(this: Tensor, o: Operand, alpha?: number) {
    return elementwise.add(this, o, alpha);
  },
  sub(this: Tensor, o: Operand, alpha?: number) {
    return elementwise.sub(this, o, alpha);
  },
  mul(this: Tensor, o: Operand) {
    return elementwise.mul(this, o);
  },
  div(this: Tensor, o: Operand) {
    return elementwise.div(this, o);
  },
  pow(this: Tensor, o: Operand) {
    return elementwise.pow(this, o);
  },
  neg(this: Tensor) {
    return elementwise.neg(this);
  },
  exp(this: Tensor) {
    return elementwise.exp(this);
  },
  log(this: Tensor) {
    return elementwise.log(this);
  },
  log1p(this: Tensor) {
    return elementwise.log1p(this);
  },
  expm1(this: Tensor) {
    return elementwise.expm1(this);
  },
  sqrt(this: Tensor) {
    return elementwise.sqrt(this);
  },
  rsqrt(this: Tensor) {
    return elementwise.rsqrt(this);
  },
  abs(this: Tensor) {
    return elementwise.abs(this);
  },
  sign(this: Tensor) {
    return elementwise.sign(this);
  },
  square(this: Tensor) {
    return elementwise.square(this);
  },
  reciprocal(this: Tensor) {
    return elementwise.reciprocal(this);
  },
  tanh(this: Tensor) {
    return elementwise.tanh(this);
  },
  sigmoid(this: Tensor) {
    return elementwise.sigmoid(this);
  },
  relu(this: Tensor) {
    return elementwise.relu(this);
  },
  gelu(this: Tensor, opts?: { approximate?: "none" | "tanh" }) {
    return elementwise.gelu(this, opts);
  },
  erf(this: Tensor) {
    return elementwise.erf(this);
  },
  sin(this: Tensor) {
    return elementwise.sin(this);
  },
  cos(this: Tensor) {
    return elementwise.cos(this);
  },
  floor(this: Tensor) {
    return elementwise.floor(this);
  },
  ceil(this: Tensor) {
    return elementwise.ceil(this);
  },
  round(this: Tensor) {
    return elementwise.round(this);
  },
  clamp(this: Tensor, lo?: number | null, hi?: number | null) {
    return elementwise.clamp(this, lo, hi);
  },
  maximum(this: Tensor, o: Tensor) {
    return elementwise.maximum(this, o);
  },
  minimum(this: Tensor, o: Tensor) {
    return elementwise.minimum(this, o);
  },
  maskedFill(this: Tensor, m: Tensor, v: number | Tensor) {
    return elementwise.maskedFill(this, m, v);
  },
  eq(this: Tensor, o: Operand) {
    return elementwise.eq(this, o);
  },
  ne(this: Tensor, o: Operand) {
    return elementwise.ne(this, o);
  },
  lt(this: Tensor, o: Operand) {
    return elementwise.lt(this, o);
  },
  le(this: Tensor, o: Operand) {
    return elementwise.le(this, o);
  },
  gt(this: Tensor, o: Operand) {
    return elementwise.gt(this, o);
  },
  ge(this: Tensor, o: Operand) {
    return elementwise.ge(this, o);
  },
  logicalAnd(this: Tensor, o: Operand) {
    return elementwise.logicalAnd(this, o);
  },
  logicalOr(this: Tensor, o: Operand) {
    return elementwise.logicalOr(this, o);
  },
  logicalNot(this: Tensor) {
    return elementwise.logicalNot(this);
  },
  isnan(this: Tensor) {
    return elementwise.isnan(this);
  },

  sum(this: Tensor, d?: Dims, k?: boolean) {
    return reduce.sum(this, d, k);
  },
  mean(this: Tensor, d?: Dims, k?: boolean) {
    return reduce.mean(this, d, k);
  },
  var(this: Tensor, d?: Dims, o?: { correction?: number; keepdim?: boolean }) {
    return reduce.variance(this, d, o);
  },
  std(this: Tensor, d?: Dims, o?: { correction?: number; keepdim?: boolean }) {
    return reduce.std(this, d, o);
  },
  max(this: Tensor, dim?: number, k?: boolean) {
    return dim === undefined ? reduce.max(this) : reduce.max(this, dim, k);
  },
  min(this: Tensor, dim?: number, k?: boolean) {
    return dim === undefined ? reduce.min(this) : reduce.min(this, dim, k);
  },
  amax(this: Tensor, d?: Dims, k?: boolean) {
    return reduce.amax(this, d, k);
  },
  argmax(this: Tensor, d?: number, k?: boolean) {
    return reduce.argmax(this, d, k);
  },
  argmin(this: Tensor, d?: number, k?: boolean) {
    return reduce.argmin(this, d, k);
  },
  logsumexp(this: Tensor, d: Dims, k?: boolean) {
    return reduce.logsumexp(this, d, k);
  },
  prod(this: Tensor, d?: number, k?: boolean) {
    return reduce.prod(this, d, k);
  },

  matmul(this: Tensor, o: Tensor) {
    return linalg.matmul(this, o);
  },
  mm(this: Tensor, o: Tensor) {
    return linalg.mm(this, o);
  },
  bmm(this: Tensor, o: Tensor) {
    return linalg.bmm(this, o);
  },
  softmax(this: Tensor, d: number) {
    return indexing.softmax(this, d);
  },
  logSoftmax(this: Tensor, d: number) {
    return indexing.logSoftmax(this, d);
  },

  view(this: Tensor, ...s: (number | readonly number[])[]) {
    return views.view(this, shapeArgs(s));
  },
  reshape(this: Tensor, ...s: (number | readonly number[])[]) {
    return views.reshape(this, shapeArgs(s));
  },
  flatten(this: Tensor, a?: number, b?: number) {
    return views.flatten(this, a, b);
  },
  permute(this: Tensor, ...d: (number | readonly number[])[]) {
    return views.permute(this, shapeArgs(d));
  },
  transpose(this: Tensor, a: number, b: number) {
    return views.transpose(this, a, b);
  },
  t(this: Tensor) {
    return views.t(this);
  },
  narrow(this: Tensor, d: number, s: number, l: number) {
    return views.narrow(this, d, s, l);
  },
  select(this: Tensor, d: number, i: number) {
    return views.select(this, d, i);
  },
  slice(this: Tensor, d: number, s?: number, e?: number, st?: number) {
    return views.slice(this, d, s, e, st);
  },
  expand(this: Tensor, ...s: (number | readonly number[])[]) {
    return views.expand(this, shapeArgs(s));
  },
  expandAs(this: Tensor, o: Tensor) {
    return views.expand(this, o.shape);
  },
  squeeze(this: Tensor, d?: number) {
    return views.squeeze(this, d);
  },
  unsqueeze(this: Tensor, d: number) {
    return views.unsqueeze(this, d);
  },
  contiguous(this: Tensor) {
    return views.contiguous(this);
  },
  clone(this: Tensor) {
    return views.clone(this);
  },
  detach(this: Tensor) {
    return views.detach(this);
  },
  split(this: Tensor, s: number | readonly number[], d?: number) {
    return views.split(this, s, d);
  },
  chunk(this: Tensor, c: number, d?: number) {
    return views.chunk(this, c, d);
  },
  indexSelect(this: Tensor, d: number, i: Tensor) {
    return indexing.indexSelect(this, d, i);
  },
  gather(this: Tensor, d: number, i: Tensor) {
    return indexing.gather(this, d, i);
  },
  scatterAdd(this: Tensor, d: number, i: Tensor, s: Tensor) {
    return indexing.scatterAdd(this, d, i, s);
  },

  to(this: Tensor, target: DType | DeviceLike, options?: { nonBlocking?: boolean }) {
    if (typeof target !== "string" || !(DTYPES as readonly string[]).includes(target)) {
      const dev = Device.parse(target);
      const from = this.device;
      const out = toDevice(this, dev, options?.nonBlocking ?? false);
      if (out === this) return out;
      return recordOp("ToCopyBackward0", out, [this], (g) => [toDevice(g, from)]);
    }
    return views.toDType(this, target as DType);
  },
  float(this: Tensor) {
    return views.toDType(this, "float32");
  },
  double(this: Tensor) {
    return views.toDType(this, "float64");
  },
  long(this: Tensor) {
    return views.toDType(this, "int64");
  },
  int(this: Tensor) {
    return views.toDType(this, "int32");
  },
  bool(this: Tensor) {
    return views.toDType(this, "bool");
  },
  half(this: Tensor) {
    return views.toDType(this, "float16");
  },
  bfloat16(this: Tensor) {
    return views.toDType(this, "bfloat16");
  },
  cpu(this: Tensor) {
    return this.to("cpu");
  },
  cuda(this: Tensor, device: number | string | Device = 0, options?: { nonBlocking?: boolean }) {
    const d = Device.parse(device);
    if (d.type !== "cuda") throw new DeviceError(`cuda() expects a CUDA device (an index or "cuda:N"), got '${d}'`);
    return this.to(d, options);
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
    return directBinary(this, "add", o, alpha ?? 1) ?? inplace(this, () => elementwise.add(this, o, alpha));
  },
  sub_(this: Tensor, o: Operand, alpha?: number) {
    return directBinary(this, "sub", o, alpha ?? 1) ?? inplace(this, () => elementwise.sub(this, o, alpha));
  },
  mul_(this: Tensor, o: Operand) {
    return directBinary(this, "mul", o) ?? inplace(this, () => elementwise.mul(this, o));
  },
  div_(this: Tensor, o: Operand) {
    return directBinary(this, "div", o) ?? inplace(this, () => elementwise.div(this, o));
  },
  pow_(this: Tensor, o: Operand) {
    return inplace(this, () => elementwise.pow(this, o));
  },
  neg_(this: Tensor) {
    return inplace(this, () => elementwise.neg(this));
  },
  exp_(this: Tensor) {
    return inplace(this, () => elementwise.exp(this));
  },
  sqrt_(this: Tensor) {
    return inplace(this, () => elementwise.sqrt(this));
  },
  tanh_(this: Tensor) {
    return inplace(this, () => elementwise.tanh(this));
  },
  sigmoid_(this: Tensor) {
    return inplace(this, () => elementwise.sigmoid(this));
  },
  relu_(this: Tensor) {
    return inplace(this, () => elementwise.relu(this));
  },
  clamp_(this: Tensor, lo?: number | null, hi?: number | null) {
    return inplace(this, () => elementwise.clamp(this, lo, hi));
  },
  maskedFill_(this: Tensor, m: Tensor, v: number | Tensor) {
    return inplace(this, () => elementwise.maskedFill(this, m, v));
  },
  addcmul_(this: Tensor, a: Tensor, b: Tensor, value = 1) {
    return inplace(this, () => elementwise.add(this, elementwise.mul(a, b), value));
  },
  addcdiv_(this: Tensor, a: Tensor, b: Tensor, value = 1) {
    return inplace(this, () => elementwise.add(this, elementwise.div(a, b), value));
  },
  lerp_(this: Tensor, end: Tensor, w: number) {
    return inplace(this, () => elementwise.add(this, elementwise.sub(end, this), w));
  },
  copy_(this: Tensor, src: Tensor | number) {
    return inplace(this, () =>
      src instanceof Tensor
        ? views.expand(views.toDType(src, this.dtype), this.shape)
        : raw.binary("add", raw.empty(this.shape, this.dtype, this.device), src),
    );
  },
  fill_(this: Tensor, v: number) {
    return typeof v === "number" ? directFill(this, v) : inplace(this, () => filled(this, v));
  },
  zero_(this: Tensor) {
    return directFill(this, 0);
  },
  uniform_(this: Tensor, low = 0, high = 1, g: Generator = defaultGenerator) {
    return fillRandom(this, () => low + (high - low) * g.random());
  },
  normal_(this: Tensor, mean = 0, std = 1, g: Generator = defaultGenerator) {
    return fillRandom(this, () => mean + std * g.normal());
  },
});

Object.defineProperty(proto, "mT", {
  get(this: Tensor) {
    return views.transpose(this, -2, -1);
  },
});

function filled(t: Tensor, v: number): Tensor {
  const out = raw.empty(t.shape, t.dtype, t.device);
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
