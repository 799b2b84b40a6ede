/**
 * Raw tensor operations: allocate the result, apply PyTorch's type promotion
 * and broadcasting, call the current backend. No autograd here — these are
 * what differentiable ops (sdk/autograd) call in their forward and backward
 * rules, as ATen kernels are to PyTorch's autograd.
 */
import { DTypeError, ShapeError, ValueError } from "../errors/index.js";
import { arraysEqual } from "../util/index.js";
import { getBackend } from "./backend/registry.js";
import { type BinaryOp, COMPARISON_OPS, type ReduceOp, type UnaryOp } from "./backend/interface.js";
import { type DType, category, getDefaultDType, isFloating, promoteTypes, scalarDType } from "./dtype.js";
import { broadcastShapes, contiguousStrides, expandStrides, numelOf, normDim, type Shape, shapeStr } from "./shape.js";
import { Storage } from "./storage.js";
import { Tensor } from "./tensor.js";
import { type Device, cpu } from "./device.js";
import { requireKernels } from "./backend/router.js";

export type Scalar = number | boolean;
export type Operand = Tensor | Scalar;

/** A zeroed contiguous tensor. */
export function empty(shape: Shape, dtype: DType, device: Device = cpu): Tensor {
  return Tensor.empty(shape, dtype, device);
}

/**
 * A contiguous tensor with undefined contents: only for kernel outputs that overwrite every element.
 * NB: results live on their inputs' device; every op below passes it.
 */
export function output(shape: Shape, dtype: DType, device: Device = cpu): Tensor {
  requireKernels(device);
  return new Tensor(Storage.allocUninit(dtype, numelOf(shape), device), [...shape], contiguousStrides(shape), 0);
}

/** A 0-dim tensor holding `v`. */
export function scalarTensor(v: Scalar, dtype: DType = scalarDType(v), device: Device = cpu): Tensor {
  requireKernels(device);
  const t = empty([], dtype, device);
  getBackend().fill(t, Number(v));
  return t;
}

export function asStrided(t: Tensor, shape: Shape, strides: readonly number[], offset: number): Tensor {
  return new Tensor(t.storage, [...shape], [...strides], offset);
}

export function expandTo(t: Tensor, shape: Shape): Tensor {
  if (arraysEqual(t.shape, shape)) return t;
  return asStrided(t, shape, expandStrides(t.shape, t.strides, shape), t.offset);
}

/** A contiguous copy of `t` with dtype `dtype` (always a new storage). */
export function copyAs(t: Tensor, dtype: DType = t.dtype): Tensor {
  const out = output(t.shape, dtype, t.device);
  getBackend().copy(t, out);
  return out;
}

export function contiguous(t: Tensor): Tensor {
  return t.isContiguous() ? t : copyAs(t);
}

export function cast(t: Tensor, dtype: DType): Tensor {
  return t.dtype === dtype ? t : copyAs(t, dtype);
}

/**
 * PyTorch's result_type: tensors with dims outrank 0-dim tensors, which outrank
 * JS numbers; a lower class only matters when it is of a higher category
 * (bool < integer < float).
 */
export function resultType(...ops: Operand[]): DType {
  let dimT: DType | null = null;
  let zeroT: DType | null = null;
  let wrapped: DType | null = null;
  for (const o of ops) {
    if (o instanceof Tensor) {
      if (o.ndim > 0) dimT = dimT ? promoteTypes(dimT, o.dtype) : o.dtype;
      else zeroT = zeroT ? promoteTypes(zeroT, o.dtype) : o.dtype;
    } else {
      // NB: an op called with a missing operand (add(x), add()) must fail, not compute NaN
      if (typeof o !== "number" && typeof o !== "boolean")
        throw new ValueError(`expected a Tensor or a number as operand, got ${o === null ? "null" : typeof o}`);
      const d = scalarDType(o);
      wrapped = wrapped ? promoteTypes(wrapped, d) : d;
    }
  }
  let r: DType = dimT ?? zeroT ?? wrapped ?? getDefaultDType();
  if (dimT && zeroT && category(zeroT) > category(r)) r = zeroT;
  if ((dimT || zeroT) && wrapped && category(wrapped) > category(r)) {
    r = isFloating(wrapped) ? getDefaultDType() : wrapped === "bool" ? r : "int64";
  }
  return r;
}

function toTensor(o: Operand, dtype: DType, device: Device): Tensor {
  if (!(o instanceof Tensor)) return scalarTensor(o, dtype, device);
  // NB: a 0-dim CPU tensor joins an op on another device as a scalar would, as in torch
  if (o.ndim === 0 && o.device.type === "cpu" && device.type !== "cpu")
    return scalarTensor(o.toArray()[0]!, dtype, device);
  return cast(o, dtype);
}

/** Where an op on these operands computes: the first tensor not on the CPU, else the CPU. */
export function deviceOf(...ops: Operand[]): Device {
  for (const o of ops) if (o instanceof Tensor && o.device.type !== "cpu") return o.device;
  return cpu;
}

function shapeOf(o: Operand): Shape {
  return o instanceof Tensor ? o.shape : [];
}

export function unary(op: UnaryOp, x: Tensor, args?: readonly number[], outDType?: DType): Tensor {
  const dtype = outDType ?? x.dtype;
  const xin = dtype === x.dtype || op === "logicalNot" || op === "isnan" ? x : cast(x, dtype);
  const out = output(x.shape, dtype, x.device);
  getBackend().unary(op, xin, out, args);
  return out;
}

/** Float ops on integer tensors compute in the default float dtype, as torch does. */
export function floatUnary(op: UnaryOp, x: Tensor, args?: readonly number[]): Tensor {
  return unary(op, x, args, isFloating(x.dtype) ? x.dtype : getDefaultDType());
}

export function binary(op: BinaryOp, a: Operand, b: Operand, computeDType?: DType): Tensor {
  let dtype = computeDType ?? resultType(a, b);
  if (op === "div" && !isFloating(dtype)) dtype = getDefaultDType();
  const shape = broadcastShapes(shapeOf(a), shapeOf(b));
  const device = deviceOf(a, b);
  const at = expandTo(toTensor(a, dtype, device), shape);
  const bt = expandTo(toTensor(b, dtype, device), shape);
  const out = output(shape, COMPARISON_OPS.has(op) ? "bool" : dtype, device);
  getBackend().binary(op, at, bt, out);
  return out;
}

export function where(cond: Tensor, a: Operand, b: Operand): Tensor {
  if (cond.dtype !== "bool")
    throw new DTypeError(`where expected condition to be a boolean tensor, but got a tensor with dtype ${cond.dtype}`);
  const dtype = resultType(a, b);
  const shape = broadcastShapes(cond.shape, shapeOf(a), shapeOf(b));
  const device = deviceOf(cond, a, b);
  const out = output(shape, dtype, device);
  getBackend().where(
    expandTo(cond.ndim === 0 ? toTensor(cond, "bool", device) : cond, shape),
    expandTo(toTensor(a, dtype, device), shape),
    expandTo(toTensor(b, dtype, device), shape),
    out,
  );
  return out;
}

/** Reduces sorted, unique `dims`; keepdim keeps them as size 1. */
export function reduce(op: ReduceOp, x: Tensor, dims: readonly number[], keepdim: boolean, outDType?: DType): Tensor {
  const kept = x.shape.map((d, i) => (dims.includes(i) ? 1 : d));
  const dtype = outDType ?? (op === "sum" || op === "prod" ? (isFloating(x.dtype) ? x.dtype : "int64") : x.dtype);
  if ((op === "max" || op === "min") && x.numel() === 0)
    throw new ShapeError(
      `${op}(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with the 'dim' argument.`,
    );
  const out = output(kept, dtype, x.device);
  getBackend().reduce(op, x, dims, out);
  return keepdim ? out : squeezeDims(out, dims);
}

export function argReduce(op: "argmax" | "argmin", x: Tensor, dim: number, keepdim: boolean): Tensor {
  if (x.shape[dim] === 0) throw new ShapeError(`${op}(): Expected reduction dim ${dim} to have non-zero size.`);
  const kept = x.shape.map((d, i) => (i === dim ? 1 : d));
  const out = output(kept, "int64", x.device);
  getBackend().argReduce(op, x, dim, out);
  return keepdim ? out : squeezeDims(out, [dim]);
}

export function squeezeDims(t: Tensor, dims: readonly number[]): Tensor {
  const shape: number[] = [];
  const strides: number[] = [];
  t.shape.forEach((d, i) => {
    if (!(dims.includes(i) && d === 1)) {
      shape.push(d);
      strides.push(t.strides[i]!);
    }
  });
  return asStrided(t, shape, strides, t.offset);
}

/** Sums a broadcast gradient back down to `shape` (the backward of expand). */
export function sumToShape(g: Tensor, shape: Shape): Tensor {
  if (arraysEqual(g.shape, shape)) return g;
  const lead = g.ndim - shape.length;
  const dims: number[] = [];
  for (let i = 0; i < g.ndim; i++) {
    if (i < lead || (shape[i - lead] === 1 && g.shape[i] !== 1)) dims.push(i);
  }
  const r = reduce("sum", g, dims, true); // fresh and contiguous: re-view without the leading dims
  return new Tensor(r.storage, [...shape], contiguousStrides(shape), 0);
}

/**
 * Matrix product with torch.matmul's rank rules: 1-D operands are promoted and
 * the added dim removed afterwards; batch dims broadcast.
 */
export function matmul(a: Tensor, b: Tensor): Tensor {
  if (a.ndim === 0 || b.ndim === 0)
    throw new ShapeError(
      "both arguments to matmul need to be at least 1D, but they are " + `${a.ndim}D and ${b.ndim}D`,
    );
  if (a.dtype !== b.dtype)
    throw new DTypeError(`expected m1 and m2 to have the same dtype, but got: ${a.dtype} != ${b.dtype}`);
  const a2 = a.ndim === 1 ? asStrided(a, [1, a.shape[0]!], [0, a.strides[0]!], a.offset) : a;
  const b2 = b.ndim === 1 ? asStrided(b, [b.shape[0]!, 1], [b.strides[0]!, 0], b.offset) : b;
  const [m, k] = a2.shape.slice(-2) as [number, number];
  const [k2, n] = b2.shape.slice(-2) as [number, number];
  if (k !== k2)
    throw new ShapeError(
      `mat1 and mat2 shapes cannot be multiplied (${a.ndim === 1 ? `1x${k}` : `${m}x${k}`} and ${k2}x${n}); ` +
        `tensor shapes ${shapeStr(a.shape)} and ${shapeStr(b.shape)}`,
    );
  const batch = broadcastShapes(a2.shape.slice(0, -2), b2.shape.slice(0, -2));
  // NB: batch dims go to the kernel as they are (any strides), so head-split views are not copied.
  const lead = batch.length === 0 ? [1] : batch;
  const a3 = expandTo(withLead(a2, lead.length + 2), [...lead, m, k]);
  const b3 = expandTo(withLead(b2, lead.length + 2), [...lead, k, n]);
  const out = output([...lead, m, n], a.dtype, a.device);
  getBackend().matmul(a3, b3, out);
  const shape = [...batch, ...(a.ndim === 1 ? [] : [m]), ...(b.ndim === 1 ? [] : [n])];
  return new Tensor(out.storage, shape, contiguousStrides(shape), 0);
}

/**
 * bias + a @ b for 2-D a [m, k] and b [k, n] of one float dtype and a bias of that dtype that
 * broadcasts to [m, n] (torch.addmm): the bias is copied into the result and one GEMM adds the
 * product to it (no separate add pass, no second [m, n] tensor).
 */
export function addmm(bias: Tensor, a: Tensor, b: Tensor): Tensor {
  if (a.ndim !== 2 || b.ndim !== 2 || a.shape[1] !== b.shape[0])
    throw new ShapeError(`addmm: expected a [m, k] and b [k, n], got ${shapeStr(a.shape)} and ${shapeStr(b.shape)}`);
  if (a.dtype !== b.dtype || bias.dtype !== a.dtype)
    throw new DTypeError(`addmm: bias, a and b must share a dtype, got ${bias.dtype}, ${a.dtype} and ${b.dtype}`);
  const [m, k, n] = [a.shape[0]!, a.shape[1]!, b.shape[1]!];
  const out = output([1, m, n], a.dtype, a.device);
  getBackend().copy(expandTo(withLead(bias, 3), [1, m, n]), out);
  getBackend().matmul(withLead(a, 3), withLead(b, 3), out, true);
  return new Tensor(out.storage, [m, n], [n, 1], 0);
}

/** `t` with size-1 dims added in front up to rank `r`. */
function withLead(t: Tensor, r: number): Tensor {
  if (t.ndim >= r) return t;
  const k = r - t.ndim;
  return asStrided(
    t,
    [...new Array<number>(k).fill(1), ...t.shape],
    [...new Array<number>(k).fill(0), ...t.strides],
    t.offset,
  );
}

export function softmax(x: Tensor, dim: number, log: boolean): Tensor {
  const xin = isFloating(x.dtype) ? x : cast(x, getDefaultDType());
  const out = output(x.shape, xin.dtype, x.device);
  getBackend().softmax(xin, normDim(dim, x.ndim), log, out);
  return out;
}

/**
 * softmax(where(mask, -inf, x / divisor)) along the last dim of a float x [..., T, S], with a bool
 * mask [T, S] (true = masked) shared by the leading dims: attention's scores to weights in one pass.
 */
export function maskedSoftmax(x: Tensor, mask: Tensor, divisor: number): Tensor {
  const T = x.shape[x.ndim - 2];
  const S = x.shape[x.ndim - 1];
  if (x.ndim < 2 || mask.ndim !== 2 || mask.shape[0] !== T || mask.shape[1] !== S)
    throw new ShapeError(
      `maskedSoftmax: expected x [..., T, S] and a mask [T, S], got ${shapeStr(x.shape)} and ${shapeStr(mask.shape)}`,
    );
  if (mask.dtype !== "bool") throw new DTypeError(`maskedSoftmax: the mask must be bool, got ${mask.dtype}`);
  if (!isFloating(x.dtype)) throw new DTypeError(`maskedSoftmax: expected a floating point x, got ${x.dtype}`);
  const out = output(x.shape, x.dtype, x.device);
  getBackend().maskedSoftmax(contiguous(x), mask, divisor, out);
  return out;
}

/** The (log-)softmax backward (Backend.softmaxBackward): gx from the forward's output y and its gradient g. */
export function softmaxBackward(y: Tensor, g: Tensor, dim: number, log: boolean): Tensor {
  const out = output(y.shape, y.dtype, y.device);
  getBackend().softmaxBackward(y, contiguous(cast(g, y.dtype)), dim, log, out);
  return out;
}

function checkIndex(index: Tensor, what: string): void {
  if (index.dtype !== "int64" && index.dtype !== "int32")
    throw new DTypeError(`${what}(): Expected dtype int64 for index, got ${index.dtype}`);
}

export function indexSelect(x: Tensor, dim: number, index: Tensor): Tensor {
  checkIndex(index, "indexSelect");
  if (index.ndim > 1) throw new ShapeError("indexSelect(): Index is supposed to be a vector");
  const d = normDim(dim, x.ndim);
  const shape = [...x.shape];
  if (x.ndim > 0) shape[d] = index.numel();
  const out = output(shape, x.dtype, x.device);
  getBackend().indexSelect(x, d, asStrided(index, [index.numel()], [index.strides[0] ?? 1], index.offset), out);
  return out;
}

export function gather(x: Tensor, dim: number, index: Tensor): Tensor {
  checkIndex(index, "gather");
  const d = normDim(dim, x.ndim);
  if (index.ndim !== x.ndim)
    throw new ShapeError(`gather(): Index tensor must have the same number of dimensions as input tensor`);
  for (let i = 0; i < x.ndim; i++)
    if (i !== d && index.shape[i]! > x.shape[i]!)
      throw new ShapeError(
        `gather(): Size does not match at dimension ${i} expected index ${shapeStr(index.shape)} to be smaller than self ${shapeStr(x.shape)} apart from dimension ${d}`,
      );
  const out = output(index.shape, x.dtype, x.device);
  getBackend().gather(x, d, index, out);
  return out;
}

/** Out of place: a copy of `x` with src scattered-added at index along dim. */
export function scatterAdd(x: Tensor, dim: number, index: Tensor, src: Tensor): Tensor {
  checkIndex(index, "scatterAdd");
  const d = normDim(dim, x.ndim);
  if (index.ndim !== x.ndim || src.ndim !== x.ndim)
    throw new ShapeError("scatterAdd(): Index tensor must have the same number of dimensions as self and src tensors");
  const out = copyAs(x);
  getBackend().scatterAdd(out, d, index, cast(src, x.dtype));
  return out;
}

/** Writes `src` (broadcast) into the view `dst` in place and bumps the storage version. */
export function copyInto(dst: Tensor, src: Operand): void {
  if (src instanceof Tensor) getBackend().copy(expandTo(src, dst.shape), dst);
  else getBackend().fill(dst, Number(src));
  dst.storage.version++;
}

export function newStorageTensor(shape: Shape, dtype: DType, device: Device = cpu): Tensor {
  return new Tensor(
    Storage.alloc(
      dtype,
      shape.reduce((p, d) => p * d, 1),
      device,
    ),
    [...shape],
    contiguousStrides(shape),
    0,
  );
}
