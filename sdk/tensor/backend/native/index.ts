/**
 * The native CPU backend: routes large float32/float64 work to the addon's
 * kernels and everything else (small tensors, where call overhead
 * dominates; int64 and 16-bit floats) to the TypeScript reference backend.
 *
 * NB: the tensor layer never imports sdk/native. The addon's kernel functions
 * are handed in (`new NativeBackend(kernels)`), by sdk/index.ts, which may
 * import both layers.
 */
import { IndexError } from "../../../errors/index.js";
import type { DType, StorageArray } from "../../dtype.js";
import { isContiguous, numelOf } from "../../shape.js";
import type { AdamStepArgs, Backend, BinaryOp, ReduceOp, SgdStepArgs, TensorView, UnaryOp } from "../interface.js";
import { TsBackend } from "../ts/index.js";

/** A view as the addon parses it (native/src/view.h). */
export interface KernelView {
  data: Float32Array | Float64Array | Int32Array | BigInt64Array | Uint8Array;
  offset: number;
  shape: readonly number[];
  strides: readonly number[];
}

/** The addon's kernel functions (contract: native/src/kernels/kernels.h). */
export interface NativeKernels {
  unary(op: string, x: KernelView, out: KernelView, a0?: number, a1?: number): void;
  binary(op: string, a: KernelView, b: KernelView, out: KernelView): void;
  where(cond: KernelView, a: KernelView, b: KernelView, out: KernelView): void;
  reduce(op: string, x: KernelView, dims: readonly number[], out: KernelView): void;
  argReduce(op: string, x: KernelView, dim: number, out: KernelView): void;
  matmul(a: KernelView, b: KernelView, out: KernelView, accumulate?: boolean): void;
  softmax(x: KernelView, dim: number, log: boolean, out: KernelView): void;
  softmaxBackward(y: KernelView, g: KernelView, log: boolean, gx: KernelView): void;
  maskedSoftmax(x: KernelView, mask: KernelView, divisor: number, out: KernelView): void;
  geluBackward(x: KernelView, g: KernelView, tanh: boolean, out: KernelView): void;
  indexSelect(x: KernelView, dim: number, index: KernelView, out: KernelView): void;
  gather(x: KernelView, dim: number, index: KernelView, out: KernelView): void;
  scatterAdd(dst: KernelView, dim: number, index: KernelView, src: KernelView): void;
  copy(src: KernelView, dst: KernelView): void;
  fill(dst: KernelView, value: number): void;
  layerNorm(
    x: KernelView,
    weight: KernelView | null,
    bias: KernelView | null,
    eps: number,
    out: KernelView,
    mean: KernelView | null,
    rstd: KernelView | null,
  ): void;
  layerNormBackward(
    g: KernelView,
    x: KernelView,
    mean: KernelView,
    rstd: KernelView,
    weight: KernelView | null,
    gx: KernelView | null,
    gw: KernelView | null,
    gb: KernelView | null,
  ): void;
  adamStep(
    p: KernelView,
    grad: KernelView,
    expAvg: KernelView,
    expAvgSq: KernelView,
    maxExpAvgSq: KernelView | null,
    decay: number,
    l2: number,
    beta1: number,
    oneMinusBeta1: number,
    beta2: number,
    oneMinusBeta2: number,
    bc2Sqrt: number,
    eps: number,
    negStepSize: number,
    maximize: boolean,
  ): void;
  sgdStep(
    p: KernelView,
    grad: KernelView,
    buf: KernelView | null,
    lr: number,
    momentum: number,
    dampening: number,
    weightDecay: number,
    nesterov: boolean,
    maximize: boolean,
    first: boolean,
  ): void;
}

export interface NativeBackendOptions {
  /**
   * Below this many elements cheap elementwise work (binary, where, fill, index copies) stays in
   * TypeScript (default 1024); kernels that do more per element (transcendental unaries,
   * softmax, reductions, strided copies, layer norm) go native from a quarter of it, matmuls from
   * a quarter of it in multiply-adds (out elements x K). Measured (bench/smallops.ts era, one
   * thread): a call into the addon costs ~2-3 µs, a TS add of 1,024 floats about as much, a TS
   * exp or softmax of 256 more, and a TS [1,4]x[4,128] matmul 3x the native one.
   */
  minNumel?: number;
  /** Allocates large storages in the addon's pool (aligned, external memory); null to use JS arrays. */
  allocArray?: ((dtype: DType, numel: number) => StorageArray | null) | null;
}

const FLOAT: ReadonlySet<DType> = new Set(["float32", "float64"]);
/** Unary ops as cheap as a TS loop body (the rest go native from NativeBackend's lower threshold). */
const CHEAP_UNARY: ReadonlySet<UnaryOp> = new Set<UnaryOp>([
  "neg",
  "abs",
  "relu",
  "square",
  "sign",
  "floor",
  "ceil",
  "round",
  "clamp",
  "logicalNot",
  "isnan",
]);

function kv(t: TensorView): KernelView {
  return { data: t.storage.data as KernelView["data"], offset: t.offset, shape: t.shape, strides: t.strides };
}

function isIndex(t: TensorView): boolean {
  return t.dtype === "int64" || t.dtype === "int32";
}

/** Native RangeErrors for bad indices become the sdk's IndexError, with the same message. */
function indexed(fn: () => void): void {
  try {
    fn();
  } catch (e) {
    if (e instanceof RangeError && /out of bounds/.test(e.message)) throw new IndexError(e.message);
    throw e;
  }
}

/**
 * A contiguous view of n elements of `dtype` (the fused kernels' operands). NB: module-level, not a
 * closure made per call: V8 drops a closure's optimized code at full GCs once its instances are dead
 * (sdk/autograd/ops/norm.ts shaped).
 */
function dense(t: TensorView, dtype: TensorView["dtype"], n: number): boolean {
  return t.dtype === dtype && numelOf(t.shape) === n && isContiguous(t.shape, t.strides);
}

export class NativeBackend implements Backend {
  readonly name = "native";
  private readonly ts = new TsBackend();
  private readonly minNumel: number;
  readonly allocArray?: (dtype: DType, numel: number) => StorageArray | null;

  constructor(
    private readonly k: NativeKernels,
    opts: NativeBackendOptions = {},
  ) {
    this.minNumel = opts.minNumel ?? 1024;
    this.minHeavy = Math.floor(this.minNumel / 4);
    if (opts.allocArray) this.allocArray = opts.allocArray;
  }

  private readonly minHeavy: number;

  private big(t: TensorView): boolean {
    return numelOf(t.shape) >= this.minNumel;
  }

  /** For kernels with more work per element than a load, an op and a store. */
  private heavy(t: TensorView): boolean {
    return numelOf(t.shape) >= this.minHeavy;
  }

  private floats(...ts: TensorView[]): boolean {
    return ts.every((t) => FLOAT.has(t.dtype));
  }

  copy(src: TensorView, dst: TensorView): void {
    const ok = (d: DType) => FLOAT.has(d) || d === "int32";
    if (this.heavy(dst) && ok(src.dtype) && ok(dst.dtype)) this.k.copy(kv(src), kv(dst));
    else this.ts.copy(src, dst);
  }

  fill(dst: TensorView, value: number): void {
    if (this.big(dst) && FLOAT.has(dst.dtype)) this.k.fill(kv(dst), value);
    else this.ts.fill(dst, value);
  }

  unary(op: UnaryOp, x: TensorView, out: TensorView, args: readonly number[] = []): void {
    const go = CHEAP_UNARY.has(op) ? this.big(x) : this.heavy(x);
    if (go && this.floats(x, out) && x.dtype === out.dtype) this.k.unary(op, kv(x), kv(out), args[0], args[1]);
    else this.ts.unary(op, x, out, args);
  }

  binary(op: BinaryOp, a: TensorView, b: TensorView, out: TensorView): void {
    if (this.big(out) && this.floats(a, b) && a.dtype === b.dtype && (out.dtype === a.dtype || out.dtype === "bool"))
      this.k.binary(op, kv(a), kv(b), kv(out));
    else this.ts.binary(op, a, b, out);
  }

  where(cond: TensorView, a: TensorView, b: TensorView, out: TensorView): void {
    if (this.big(out) && this.floats(a, b, out) && a.dtype === out.dtype && b.dtype === out.dtype)
      this.k.where(kv(cond), kv(a), kv(b), kv(out));
    else this.ts.where(cond, a, b, out);
  }

  reduce(op: ReduceOp, x: TensorView, dims: readonly number[], out: TensorView): void {
    if (this.heavy(x) && this.floats(x) && x.dtype === out.dtype) this.k.reduce(op, kv(x), dims, kv(out));
    else this.ts.reduce(op, x, dims, out);
  }

  argReduce(op: "argmax" | "argmin", x: TensorView, dim: number, out: TensorView): void {
    if (this.heavy(x) && this.floats(x)) this.k.argReduce(op, kv(x), dim, kv(out));
    else this.ts.argReduce(op, x, dim, out);
  }

  matmul(a: TensorView, b: TensorView, out: TensorView, accumulate = false): void {
    // NB: even small matmuls win natively once K is large; route by work, not by output size.
    const work = numelOf(out.shape) * (a.shape[a.shape.length - 1] ?? 1);
    if (work >= this.minHeavy && this.floats(a, b) && a.dtype === b.dtype)
      this.k.matmul(kv(a), kv(b), kv(out), accumulate);
    else this.ts.matmul(a, b, out, accumulate);
  }

  softmax(x: TensorView, dim: number, log: boolean, out: TensorView): void {
    if (this.heavy(x) && this.floats(x) && x.dtype === out.dtype) this.k.softmax(kv(x), dim, log, kv(out));
    else this.ts.softmax(x, dim, log, out);
  }

  maskedSoftmax(x: TensorView, mask: TensorView, divisor: number, out: TensorView): void {
    const c = (t: TensorView) => isContiguous(t.shape, t.strides);
    if (this.heavy(x) && this.floats(x) && mask.dtype === "bool" && mask.shape.length === 2 && c(x) && c(mask))
      this.k.maskedSoftmax(kv(x), kv(mask), divisor, kv(out));
    else this.ts.maskedSoftmax(x, mask, divisor, out);
  }

  softmaxBackward(y: TensorView, g: TensorView, dim: number, log: boolean, out: TensorView): void {
    const c = (t: TensorView) => isContiguous(t.shape, t.strides);
    // the native kernel takes rows along the last dim; other dims and layouts take the reference
    if (this.heavy(y) && this.floats(y) && g.dtype === y.dtype && dim === y.shape.length - 1 && c(y) && c(g))
      this.k.softmaxBackward(kv(y), kv(g), log, kv(out));
    else this.ts.softmaxBackward(y, g, dim, log, out);
  }

  indexSelect(x: TensorView, dim: number, index: TensorView, out: TensorView): void {
    if (this.big(out) && this.floats(x) && isIndex(index))
      indexed(() => this.k.indexSelect(kv(x), dim, kv(index), kv(out)));
    else this.ts.indexSelect(x, dim, index, out);
  }

  gather(x: TensorView, dim: number, index: TensorView, out: TensorView): void {
    if (this.big(out) && this.floats(x) && isIndex(index)) indexed(() => this.k.gather(kv(x), dim, kv(index), kv(out)));
    else this.ts.gather(x, dim, index, out);
  }

  scatterAdd(dst: TensorView, dim: number, index: TensorView, src: TensorView): void {
    if (this.big(index) && this.floats(dst, src) && dst.dtype === src.dtype && isIndex(index))
      indexed(() => this.k.scatterAdd(kv(dst), dim, kv(index), kv(src)));
    else this.ts.scatterAdd(dst, dim, index, src);
  }

  layerNorm(
    x: TensorView,
    weight: TensorView | null,
    bias: TensorView | null,
    eps: number,
    out: TensorView,
    mean: TensorView,
    rstd: TensorView,
  ): void {
    const same = (t: TensorView | null) => t === null || t.dtype === x.dtype;
    if (this.heavy(x) && this.floats(x) && same(weight) && same(bias))
      this.k.layerNorm(kv(x), weight && kv(weight), bias && kv(bias), eps, kv(out), kv(mean), kv(rstd));
    else this.ts.layerNorm(x, weight, bias, eps, out, mean, rstd);
  }

  layerNormBackward(
    g: TensorView,
    x: TensorView,
    mean: TensorView,
    rstd: TensorView,
    weight: TensorView | null,
    gx: TensorView | null,
    gw: TensorView | null,
    gb: TensorView | null,
  ): void {
    const same = (t: TensorView | null) => t === null || t.dtype === x.dtype;
    if (this.heavy(x) && this.floats(x) && [g, mean, rstd, weight, gx, gw, gb].every(same))
      this.k.layerNormBackward(
        kv(g),
        kv(x),
        kv(mean),
        kv(rstd),
        weight && kv(weight),
        gx && kv(gx),
        gw && kv(gw),
        gb && kv(gb),
      );
    else this.ts.layerNormBackward(g, x, mean, rstd, weight, gx, gw, gb);
  }

  adamStep(
    p: TensorView,
    grad: TensorView,
    expAvg: TensorView,
    expAvgSq: TensorView,
    maxExpAvgSq: TensorView | null,
    h: AdamStepArgs,
  ): void {
    // NB: no size threshold: one call replaces a dozen, so the native loop wins at any size.
    if (this.floats(p))
      this.k.adamStep(
        kv(p),
        kv(grad),
        kv(expAvg),
        kv(expAvgSq),
        maxExpAvgSq && kv(maxExpAvgSq),
        h.decay,
        h.l2,
        h.beta1,
        h.oneMinusBeta1,
        h.beta2,
        h.oneMinusBeta2,
        h.bc2Sqrt,
        h.eps,
        h.negStepSize,
        h.maximize,
      );
    else this.ts.adamStep(p, grad, expAvg, expAvgSq, maxExpAvgSq, h);
  }

  geluBackward(x: TensorView, g: TensorView, tanh: boolean, out: TensorView): boolean {
    const n = numelOf(x.shape);
    if (!this.heavy(x) || !dense(x, "float32", n) || !dense(g, "float32", n) || !dense(out, "float32", n)) return false;
    this.k.geluBackward(kv(x), kv(g), tanh, kv(out));
    return true;
  }

  sgdStep(p: TensorView, grad: TensorView, buf: TensorView | null, h: SgdStepArgs): boolean {
    // NB: no size threshold, as adamStep: one call replaces up to a dozen
    const n = numelOf(p.shape);
    if (!this.floats(p) || !dense(p, p.dtype, n) || !dense(grad, p.dtype, n) || (buf && !dense(buf, p.dtype, n)))
      return false;
    this.k.sgdStep(
      kv(p),
      kv(grad),
      buf && kv(buf),
      h.lr,
      h.momentum,
      h.dampening,
      h.weightDecay,
      h.nesterov,
      h.maximize,
      h.first,
    );
    return true;
  }
}
