/**
 * The kernel interface. Every computation on tensor data goes through a
 * Backend; the pure-TypeScript backend (./ts) defines the semantics and the
 * native backend must match it (one parity suite runs over both).
 *
 * Contract for every kernel:
 * 1. Inputs are strided views (any strides, stride 0 for broadcast dims).
 * 2. `out` is a freshly allocated contiguous tensor of the documented shape
 *    and dtype, owned by the caller; kernels never allocate results. Its
 *    contents are undefined: kernels overwrite every element.
 * 3. Elementwise inputs already have the result's compute dtype (the op layer
 *    casts first), except comparisons (out: bool) and `where` (cond: bool).
 * 4. Kernels throw only typed errors (IndexError for bad indices).
 * 5. For unary and binary, `out` may also be one of the inputs (the very same
 *    contiguous view): element i of each input is read before element i of
 *    out is written. Backward rules use this to reuse a fresh temporary.
 */
import type { DType, StorageArray } from "../dtype.js";
import type { Shape } from "../shape.js";
import type { Storage } from "../storage.js";
import type { Device, DeviceType } from "../device.js";

/** The view of a tensor a kernel sees: no autograd, no methods. */
export interface TensorView {
  readonly storage: Storage;
  readonly shape: Shape;
  readonly strides: readonly number[];
  readonly offset: number;
  readonly dtype: DType;
}

export type UnaryOp =
  | "neg"
  | "exp"
  | "log"
  | "sqrt"
  | "rsqrt"
  | "abs"
  | "sign"
  | "tanh"
  | "sigmoid"
  | "relu"
  | "gelu" // exact (erf) form, as torch's default
  | "geluTanh" // tanh approximation, as approximate="tanh"
  | "geluGrad" // d gelu / dx, for the backward rule
  | "geluTanhGrad"
  | "erf"
  | "sin"
  | "cos"
  | "reciprocal"
  | "square"
  | "log1p"
  | "expm1"
  | "floor"
  | "ceil"
  | "round"
  | "logicalNot"
  | "clamp" // args: [min, max], either may be NaN for "none"
  | "powScalar" // args: [exponent]
  | "isnan";

export type BinaryOp =
  | "add"
  | "sub"
  | "mul"
  | "div"
  | "pow"
  | "maximum"
  | "minimum"
  | "eq"
  | "ne"
  | "lt"
  | "le"
  | "gt"
  | "ge"
  | "logicalAnd"
  | "logicalOr";

export type ReduceOp = "sum" | "prod" | "max" | "min";

export const COMPARISON_OPS: ReadonlySet<BinaryOp> = new Set([
  "eq",
  "ne",
  "lt",
  "le",
  "gt",
  "ge",
  "logicalAnd",
  "logicalOr",
]);

export interface Backend {
  /** Short name used by TPRPC_BACKEND and in test names ("ts", "native"). */
  readonly name: string;

  /**
   * Optional: allocates the array behind a new storage (e.g. aligned, pooled
   * native memory). Returning null falls back to a plain typed array.
   */
  readonly allocArray?: (dtype: DType, numel: number) => StorageArray | null;

  /** dst[i] = cast(src[i]) for views of the same shape; dtypes may differ. */
  copy(src: TensorView, dst: TensorView): void;

  /** Sets every element of the view to `value` (cast to the view's dtype). */
  fill(dst: TensorView, value: number): void;

  /** out = op(x), out has x's shape. Float ops on integer inputs are not called (the op layer casts). */
  unary(op: UnaryOp, x: TensorView, out: TensorView, args?: readonly number[]): void;

  /** out = a op b; a and b are already broadcast to out's shape (and share a dtype). */
  binary(op: BinaryOp, a: TensorView, b: TensorView, out: TensorView): void;

  /** out = cond ? a : b, all broadcast to out's shape. */
  where(cond: TensorView, a: TensorView, b: TensorView, out: TensorView): void;

  /** Reduces `dims` (sorted, unique); out has x's shape with those dims set to 1. */
  reduce(op: ReduceOp, x: TensorView, dims: readonly number[], out: TensorView): void;

  /** Index of the max/min along `dim` (first occurrence); out (int64) has x's shape with dim set to 1. */
  argReduce(op: "argmax" | "argmin", x: TensorView, dim: number, out: TensorView): void;

  /**
   * Batched matmul: a [...batch, M, K] @ b [...batch, K, N] -> out [...batch, M, N], one rank >= 3.
   * a's and b's batch dims are out's (broadcast ones with stride 0) and may have any strides (e.g.
   * a head-split view [B, heads, T, hs] of a [B, T, 3C] projection): kernels must not need them merged.
   * With `accumulate`, out's contents are kept and the product added to them (BLAS's beta = 1; a
   * linear layer's bias this way costs no extra pass); otherwise they are undefined on entry.
   */
  matmul(a: TensorView, b: TensorView, out: TensorView, accumulate?: boolean): void;

  /** (log-)softmax along `dim`; out has x's shape. */
  softmax(x: TensorView, dim: number, log: boolean, out: TensorView): void;

  /**
   * Attention's softmax(where(mask, -inf, x / divisor)) along the last dim of a contiguous float x
   * [..., T, S]; mask is a bool [T, S] view shared by every leading index (true = masked). Equals
   * the div, where and softmax composite. out has x's shape.
   */
  maskedSoftmax(x: TensorView, mask: TensorView, divisor: number, out: TensorView): void;

  /**
   * The backward of (log-)softmax along `dim`, given its output y and the output's gradient g
   * (both x's shape): softmax gx = y (g - Σ g y), logSoftmax gx = g - exp(y) Σ g, the sums along
   * dim accumulated in float64 and rounded to the dtype. out has y's shape.
   */
  softmaxBackward(y: TensorView, g: TensorView, dim: number, log: boolean, out: TensorView): void;

  /** out = x.indexSelect(dim, index) with index a 1-D int64/int32 view. */
  indexSelect(x: TensorView, dim: number, index: TensorView, out: TensorView): void;

  /** out[i][j][k] = x[index[i][j][k]][j][k] (for dim 0); out has index's shape. */
  gather(x: TensorView, dim: number, index: TensorView, out: TensorView): void;

  /** In place: dst[index[i][j]][j] += src[i][j] (for dim 0). */
  scatterAdd(dst: TensorView, dim: number, index: TensorView, src: TensorView): void;

  /**
   * Layer norm over the last dim of a contiguous [rows, D] float view (biased
   * variance): out = (x - mean) * rstd * weight + bias; also writes mean and
   * rstd ([rows], x's dtype) for the backward. weight/bias may be null.
   */
  layerNorm(
    x: TensorView,
    weight: TensorView | null,
    bias: TensorView | null,
    eps: number,
    out: TensorView,
    mean: TensorView,
    rstd: TensorView,
  ): void;

  /**
   * The backward of layerNorm over contiguous [rows, D] float views g (the output's gradient) and
   * x, given layerNorm's mean and rstd ([rows]) and weight ([D] or null). With x̂ = (x - mean) rstd
   * and ĝ = g weight: gx = rstd (ĝ - mean(ĝ) - x̂ mean(ĝ x̂)) ([rows, D]), gw = Σ_rows g x̂ and
   * gb = Σ_rows g ([D]). Null outputs are not computed. Sums accumulate in float64.
   */
  layerNormBackward(
    g: TensorView,
    x: TensorView,
    mean: TensorView,
    rstd: TensorView,
    weight: TensorView | null,
    gx: TensorView | null,
    gw: TensorView | null,
    gb: TensorView | null,
  ): void;

  /**
   * One Adam/AdamW step, in place, over contiguous float views of one dtype and element count:
   * torch.optim.Adam/AdamW's single-tensor path (sdk/optim/adam.ts), op for op, each result
   * rounded to the dtype (so it equals the chain of tensor ops it replaces):
   *
   *   g = maximize ? -grad : grad;  p = p * decay;  g = g + p * l2
   *   m = m * beta1 + g * oneMinusBeta1;  v = v * beta2 + (g * g) * oneMinusBeta2
   *   vmax = maximum(vmax, v)   (when maxExpAvgSq is given; the denominator then uses it)
   *   p = p + (m / (sqrt(v) / bc2Sqrt + eps)) * negStepSize
   *
   * The scalars are rounded to the dtype first, as scalar operands of tensor ops are; decay = 1
   * and l2 = 0 skip their lines.
   */
  adamStep(
    p: TensorView,
    grad: TensorView,
    expAvg: TensorView,
    expAvgSq: TensorView,
    maxExpAvgSq: TensorView | null,
    h: AdamStepArgs,
  ): void;

  /**
   * Optional: one SGD step in place, torch.optim.SGD's single-tensor update op for op (sdk/optim/sgd.ts):
   *
   *   d = maximize ? -grad : grad;  d = d + p * weightDecay
   *   buf = first ? d : buf * momentum + d * (1 - dampening);  d = nesterov ? d + buf * momentum : buf
   *   p = p + d * -lr        (the buf lines only with momentum != 0 and a buf)
   *
   * Returns false, having written nothing, when it does not take these views (the optimizer then
   * runs the same update as tensor ops); backends without it always take that path.
   */
  sgdStep?(p: TensorView, grad: TensorView, buf: TensorView | null, h: SgdStepArgs): boolean;

  /**
   * Optional: GELU's backward in one pass, out = g * gelu'(x) (tanh: the tanh approximation's
   * derivative), x, g and out of one shape: the numbers of unary geluGrad (geluTanhGrad) followed by
   * binary mul with g. Returns false, having written nothing, when it does not take these views (the
   * caller then runs those two ops); backends without it always take that path.
   */
  geluBackward?(x: TensorView, g: TensorView, tanh: boolean, out: TensorView): boolean;
}

/** The hyperparameters of one SGD step (Backend.sgdStep); first: buf is written, not read. */
export interface SgdStepArgs {
  readonly lr: number;
  readonly momentum: number;
  readonly dampening: number;
  readonly weightDecay: number;
  readonly nesterov: boolean;
  readonly maximize: boolean;
  readonly first: boolean;
}

/** The scalars of one Adam step (Backend.adamStep). */
export interface AdamStepArgs {
  /** p is multiplied by this first (AdamW: 1 - lr * weightDecay; 1 for none). */
  readonly decay: number;
  /** Adam's L2 weight decay: g += l2 * p (0 for none). */
  readonly l2: number;
  readonly beta1: number;
  readonly oneMinusBeta1: number;
  readonly beta2: number;
  readonly oneMinusBeta2: number;
  /** sqrt(1 - beta2^step) */
  readonly bc2Sqrt: number;
  readonly eps: number;
  /** -lr / (1 - beta1^step) */
  readonly negStepSize: number;
  readonly maximize: boolean;
}

/**
 * Memory on a non-CPU device, as a DeviceBackend hands it out. The backend
 * owns it: it is returned to the backend's allocator once this object is
 * garbage collected (the CUDA backend keeps a caching allocator, as torch).
 */
export interface DeviceMemory {
  /** The device holding the bytes ("cuda:N"). */
  readonly device: Device;
  readonly byteLength: number;
  /** The backend's handle (for CUDA: the CUdeviceptr as a bigint). Opaque to the tensor layer. */
  readonly handle: unknown;
}

/**
 * A backend for one non-CPU device type: allocation and copies. The tensor
 * layer moves tensors between devices only through this interface
 * (`x.to("cuda:0")`, `.cuda()`, `.cpu()`), so the pure-TS test double in
 * test/tensor/device.test.ts and the CUDA backend are interchangeable.
 *
 * Contract:
 * 1. A backend is registered (registerDeviceBackend) only when it is viable;
 *    when it is not, the loader records why (noteDeviceUnavailable) and using
 *    the device gives a DeviceError carrying that reason.
 * 2. Copies are synchronous from the caller's point of view: when one
 *    returns, the destination holds the bytes (as torch's blocking copies).
 * 3. Offsets and lengths are in bytes and lie within both buffers (the tensor
 *    layer checks); backends throw DeviceError/NativeError on failure.
 */
export interface DeviceBackend {
  /** The device type served ("cuda"). */
  readonly type: Exclude<DeviceType, "cpu">;
  /** Short name for diagnostics ("cuda-driver"). */
  readonly name: string;
  /** Number of devices of this type visible to the process (> 0 once registered). */
  deviceCount(): number;
  /** Fresh memory on `device`; contents undefined unless `zero`. */
  alloc(device: Device, byteLength: number, zero: boolean): DeviceMemory;
  /**
   * dst[dstOffset .. dstOffset + src.byteLength) = src (host to device). With `nonBlocking` (torch's
   * non_blocking=True) it may return before the copy ran: src may be reused at once, the bytes reach
   * dst in stream order (backends that lack streams ignore it).
   */
  copyFromHost(src: Uint8Array, dst: DeviceMemory, dstOffset: number, nonBlocking?: boolean): void;
  /** dst = src[srcOffset .. srcOffset + dst.byteLength) (device to host). */
  copyToHost(src: DeviceMemory, srcOffset: number, dst: Uint8Array): void;
  /** Optional: page-locked host memory (Tensor.pinMemory), faster to copy and copied without staging. */
  pinnedHost?(byteLength: number): ArrayBuffer;
  /** Optional: whether `bytes` lie in memory from pinnedHost (Tensor.isPinned). */
  isPinned?(bytes: Uint8Array): boolean;
  /** Free and total bytes of `device` (optional; torch.cuda.mem_get_info). */
  memoryInfo?(device: Device): { free: number; total: number };
  /** Device to device, possibly across devices of this type (peer copy). */
  copyDevice(src: DeviceMemory, srcOffset: number, dst: DeviceMemory, dstOffset: number, byteLength: number): void;
}
