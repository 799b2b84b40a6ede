/**
 * The kernel Backend for tensors on CUDA devices: every method hands the views'
 * device addresses, offsets, shapes and strides to the addon's CUDA dispatch
 * code (native/src/cuda/ops.cc), which launches the kernels of
 * native/src/cuda/*.cu. The same object serves a real GPU (the fatbin on the
 * CUDA driver) and the emulated device of TPRPC_CUDA=emulate (the same
 * kernels compiled for the host, over host memory): only the addon's launcher
 * differs, so the parity suite run on the emulated device checks this file and
 * the dispatch code as they run on a GPU.
 *
 * Dtypes: float32, float64, int32, int64, uint8 and bool; float16/bfloat16
 * tensors give a DTypeError (cast them first).
 *
 * Index errors: an index kernel (indexSelect, gather, scatterAdd) records a bad
 * index on the device and the op returns at once, as PyTorch's CUDA ops do;
 * the IndexError is thrown at the next synchronization, i.e. the next blocking
 * copy to the host (`.item()`, `.cpu()`, `.tolist()`) or `cuda.synchronize()`
 * (checkErrors, which sdk/index.ts hooks after them). CUDA_LAUNCH_BLOCKING=1
 * makes the op itself throw, at the cost of a synchronization per index op.
 */
import { DTypeError, IndexError, DeviceError } from "../../../errors/index.js";
import type { DType } from "../../dtype.js";
import type { AdamStepArgs, Backend, BinaryOp, ReduceOp, TensorView, UnaryOp } from "../interface.js";

/** A view as the addon takes it. */
export interface KernelView {
  ptr: bigint;
  offset: number;
  dtype: number;
  shape: readonly number[];
  strides: readonly number[];
}
type KV = KernelView;
type NKV = KernelView | null;

/** The addon's cudaKernels(mode) namespace (sdk/native/cuda_kernels.ts types and wraps it). */
export interface CudaKernelApi {
  readonly mode: string;
  copy(dev: number, src: KV, dst: KV): void;
  fill(dev: number, dst: KV, value: number): void;
  unary(dev: number, op: string, x: KV, out: KV, s0: number, s1: number): void;
  binary(dev: number, op: string, a: KV, b: KV, out: KV): void;
  where(dev: number, c: KV, a: KV, b: KV, out: KV): void;
  reduce(dev: number, op: number, x: KV, dims: readonly number[], out: KV): void;
  argReduce(dev: number, argmin: boolean, x: KV, dim: number, out: KV): void;
  matmul(dev: number, a: KV, b: KV, out: KV, accumulate: boolean): void;
  softmax(dev: number, x: KV, dim: number, log: boolean, out: KV): void;
  maskedSoftmax(dev: number, x: KV, mask: KV, divisor: number, out: KV): void;
  softmaxBackward(dev: number, y: KV, g: KV, dim: number, log: boolean, out: KV): void;
  indexSelect(dev: number, x: KV, dim: number, index: KV, out: KV): void;
  gather(dev: number, x: KV, dim: number, index: KV, out: KV): void;
  scatterAdd(dev: number, dst: KV, dim: number, index: KV, src: KV): void;
  layerNorm(dev: number, x: KV, w: NKV, b: NKV, eps: number, out: KV, mean: KV, rstd: KV): void;
  layerNormBackward(dev: number, g: KV, x: KV, mean: KV, rstd: KV, w: NKV, gx: NKV, gw: NKV, gb: NKV): void;
  adamStep(dev: number, p: KV, g: KV, m: KV, v: KV, vmax: NKV, scalars: Float64Array, maximize: boolean): void;
  /** false: matmul runs the tk_matmul kernel instead of the BLAS (tests cover both). */
  setUseBlas(on: boolean): void;
  /** Index errors at the op (CUDA_LAUNCH_BLOCKING=1 sets it at load) instead of the next synchronization. */
  setLaunchBlocking(on: boolean): void;
  /** Throws EINDEX when an index kernel since the last check met a bad index (reads the device's error word). */
  checkErrors(dev: number): void;
}

const CODES: Partial<Record<DType, number>> = { float32: 0, float64: 1, int32: 2, int64: 3, uint8: 4, bool: 5 };
const REDUCE_CODES: Record<ReduceOp, number> = { sum: 0, prod: 1, max: 2, min: 3 };

function kv(t: TensorView): KernelView {
  const mem = t.storage.memory;
  if (!mem) throw new DeviceError(`a CUDA kernel got a tensor on '${t.storage.device}'`);
  const dtype = CODES[t.dtype];
  if (dtype === undefined)
    throw new DTypeError(`${t.dtype} tensors have no CUDA kernels yet: cast them to float32 first`);
  return { ptr: mem.handle as bigint, offset: t.offset, dtype, shape: t.shape, strides: t.strides };
}

function nkv(t: TensorView | null): KernelView | null {
  return t ? kv(t) : null;
}

function dev(t: TensorView): number {
  return t.storage.device.index;
}

/** Runs f, turning the addon's EINDEX into the IndexError the CPU backends throw. */
function indexed(f: () => void): void {
  try {
    f();
  } catch (e) {
    if ((e as { code?: unknown }).code === "EINDEX") throw new IndexError((e as Error).message);
    throw e;
  }
}

export class CudaKernelBackend implements Backend {
  readonly name: string;

  constructor(private readonly k: CudaKernelApi) {
    this.name = `cuda-${k.mode}`;
  }

  /** Throws the IndexError an index kernel on `device` recorded since the last check, if any. */
  checkErrors(device: number): void {
    indexed(() => this.k.checkErrors(device));
  }

  copy(src: TensorView, dst: TensorView): void {
    this.k.copy(dev(dst), kv(src), kv(dst));
  }
  fill(dst: TensorView, value: number): void {
    this.k.fill(dev(dst), kv(dst), value);
  }
  unary(op: UnaryOp, x: TensorView, out: TensorView, args: readonly number[] = []): void {
    this.k.unary(dev(out), op, kv(x), kv(out), args[0] ?? Number.NaN, args[1] ?? Number.NaN);
  }
  binary(op: BinaryOp, a: TensorView, b: TensorView, out: TensorView): void {
    this.k.binary(dev(out), op, kv(a), kv(b), kv(out));
  }
  where(cond: TensorView, a: TensorView, b: TensorView, out: TensorView): void {
    this.k.where(dev(out), kv(cond), kv(a), kv(b), kv(out));
  }
  reduce(op: ReduceOp, x: TensorView, dims: readonly number[], out: TensorView): void {
    this.k.reduce(dev(out), REDUCE_CODES[op], kv(x), dims, kv(out));
  }
  argReduce(op: "argmax" | "argmin", x: TensorView, dim: number, out: TensorView): void {
    this.k.argReduce(dev(out), op === "argmin", kv(x), dim, kv(out));
  }
  matmul(a: TensorView, b: TensorView, out: TensorView, accumulate = false): void {
    this.k.matmul(dev(out), kv(a), kv(b), kv(out), accumulate);
  }
  softmax(x: TensorView, dim: number, log: boolean, out: TensorView): void {
    this.k.softmax(dev(out), kv(x), dim, log, kv(out));
  }
  maskedSoftmax(x: TensorView, mask: TensorView, divisor: number, out: TensorView): void {
    this.k.maskedSoftmax(dev(out), kv(x), kv(mask), divisor, kv(out));
  }
  softmaxBackward(y: TensorView, g: TensorView, dim: number, log: boolean, out: TensorView): void {
    this.k.softmaxBackward(dev(out), kv(y), kv(g), dim, log, kv(out));
  }
  indexSelect(x: TensorView, dim: number, index: TensorView, out: TensorView): void {
    indexed(() => this.k.indexSelect(dev(out), kv(x), dim, kv(index), kv(out)));
  }
  gather(x: TensorView, dim: number, index: TensorView, out: TensorView): void {
    indexed(() => this.k.gather(dev(out), kv(x), dim, kv(index), kv(out)));
  }
  scatterAdd(dst: TensorView, dim: number, index: TensorView, src: TensorView): void {
    indexed(() => this.k.scatterAdd(dev(dst), kv(dst), dim, kv(index), kv(src)));
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
    this.k.layerNorm(dev(out), kv(x), nkv(weight), nkv(bias), eps, kv(out), kv(mean), kv(rstd));
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
    this.k.layerNormBackward(dev(x), kv(g), kv(x), kv(mean), kv(rstd), nkv(weight), nkv(gx), nkv(gw), nkv(gb));
  }
  adamStep(
    p: TensorView,
    grad: TensorView,
    expAvg: TensorView,
    expAvgSq: TensorView,
    maxExpAvgSq: TensorView | null,
    h: AdamStepArgs,
  ): void {
    if (p.dtype !== "float32" && p.dtype !== "float64")
      throw new DTypeError(`adamStep on CUDA takes float32 or float64 parameters, got ${p.dtype}`);
    const s = new Float64Array([
      h.decay,
      h.l2,
      h.beta1,
      h.oneMinusBeta1,
      h.beta2,
      h.oneMinusBeta2,
      h.bc2Sqrt,
      h.eps,
      h.negStepSize,
    ]);
    this.k.adamStep(dev(p), kv(p), kv(grad), kv(expAvg), kv(expAvgSq), nkv(maxExpAvgSq), s, h.maximize);
  }
}
