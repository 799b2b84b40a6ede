/**
 * Shape ops. Views (view, reshape when possible, transpose, permute, narrow,
 * select, slice, expand, squeeze, unsqueeze) share storage with their input;
 * cat/stack copy; split/chunk return views. Each has its gradient rule.
 */
import { DTypeError, IndexError, ShapeError, ValueError } from "../../errors/index.js";
import { type DType, promoteTypes } from "../../tensor/dtype.js";
import * as raw from "../../tensor/raw.js";
import { contiguousStrides, inferShape, normDim, shapeStr, viewStrides } from "../../tensor/shape.js";
import type { Tensor } from "../../tensor/tensor.js";
import { asView, recordOp } from "../function.js";

function makeView(x: Tensor, shape: readonly number[], strides: readonly number[], offset: number): Tensor {
  return asView(raw.asStrided(x, shape, strides, offset), x);
}

/** Gradient reshaped (copying if needed) to `shape`. */
function reshapeGrad(g: Tensor, shape: readonly number[]): Tensor {
  const s = viewStrides(g.shape, g.strides, shape);
  if (s) return raw.asStrided(g, shape, s, g.offset);
  const c = raw.copyAs(g);
  return raw.asStrided(c, shape, contiguousStrides(shape), 0);
}

export function view(x: Tensor, shape: readonly number[]): Tensor {
  const target = inferShape(shape, x.numel());
  const s = viewStrides(x.shape, x.strides, target);
  if (!s)
    throw new ShapeError(
      "view size is not compatible with input tensor's size and stride (at least one dimension spans across two " +
        "contiguous subspaces). Use .reshape(...) instead.",
    );
  const out = makeView(x, target, s, x.offset);
  return recordOp("ViewBackward0", out, [x], (g) => [reshapeGrad(g, x.shape)]);
}

export function reshape(x: Tensor, shape: readonly number[]): Tensor {
  const target = inferShape(shape, x.numel());
  if (viewStrides(x.shape, x.strides, target)) return view(x, target);
  return view(contiguous(x), target);
}

export function flatten(x: Tensor, startDim = 0, endDim = -1): Tensor {
  if (x.ndim === 0) return reshape(x, [1]);
  const s = normDim(startDim, x.ndim);
  const e = normDim(endDim, x.ndim);
  if (s > e) throw new ShapeError("flatten() has invalid args: startDim cannot come after endDim");
  const mid = x.shape.slice(s, e + 1).reduce((p, d) => p * d, 1);
  return reshape(x, [...x.shape.slice(0, s), mid, ...x.shape.slice(e + 1)]);
}

export function permute(x: Tensor, dims: readonly number[]): Tensor {
  if (dims.length !== x.ndim)
    throw new ShapeError(
      `permute(sparse_coo): number of dimensions in the tensor input does not match the length of the desired ordering of dimensions i.e. input.dim() = ${x.ndim} is not equal to len(dims) = ${dims.length}`,
    );
  const d = dims.map((i) => normDim(i, x.ndim));
  if (new Set(d).size !== d.length) throw new IndexError("permute(): repeated dim");
  const out = makeView(
    x,
    d.map((i) => x.shape[i]!),
    d.map((i) => x.strides[i]!),
    x.offset,
  );
  const inv = new Array<number>(d.length);
  d.forEach((v, i) => {
    inv[v] = i;
  });
  return recordOp("PermuteBackward0", out, [x], (g) => [
    raw.asStrided(
      g,
      inv.map((i) => g.shape[i]!),
      inv.map((i) => g.strides[i]!),
      g.offset,
    ),
  ]);
}

export function transpose(x: Tensor, dim0: number, dim1: number): Tensor {
  if (x.ndim === 0) return x;
  const a = normDim(dim0, x.ndim);
  const b = normDim(dim1, x.ndim);
  const order = [...Array(x.ndim).keys()];
  [order[a], order[b]] = [order[b]!, order[a]!];
  return permute(x, order);
}

/** 2-D transpose (0-D and 1-D tensors are returned as is), as torch.t. */
export function t(x: Tensor): Tensor {
  if (x.ndim > 2) throw new ShapeError(`t() expects a tensor with <= 2 dimensions, but self is ${x.ndim}D`);
  return x.ndim < 2 ? x : transpose(x, 0, 1);
}

/** Elements start, start+step, ... < end along dim (negative start/end count from the end; clamped). */
export function slice(x: Tensor, dim: number, start = 0, end?: number, step = 1): Tensor {
  const d = normDim(dim, x.ndim);
  const size = x.shape[d]!;
  if (!Number.isInteger(step) || step <= 0) throw new ValueError("slice step must be a positive integer");
  let s = start < 0 ? start + size : start;
  let e = end === undefined ? size : end < 0 ? end + size : end;
  s = Math.min(Math.max(s, 0), size);
  e = Math.min(Math.max(e, s), size);
  const len = Math.ceil((e - s) / step);
  const shape = [...x.shape];
  const strides = [...x.strides];
  shape[d] = len;
  strides[d] = x.strides[d]! * step;
  const out = makeView(x, shape, strides, x.offset + s * x.strides[d]!);
  return recordOp("SliceBackward0", out, [x], (g) => {
    const z = raw.empty(x.shape, g.dtype, g.device);
    raw.copyInto(
      raw.asStrided(
        z,
        shape,
        contiguousStrides(x.shape).map((v, i) => (i === d ? v * step : v)),
        s * contiguousStrides(x.shape)[d]!,
      ),
      g,
    );
    return [z];
  });
}

export function narrow(x: Tensor, dim: number, start: number, length: number): Tensor {
  const d = normDim(dim, x.ndim);
  const size = x.shape[d]!;
  const s = start < 0 ? start + size : start;
  if (s < 0 || length < 0 || s + length > size)
    throw new IndexError(`start (${start}) + length (${length}) exceeds dimension size (${size}).`);
  return slice(x, d, s, s + length);
}

/** The slice at `index` along dim, with that dim removed (x[i] for dim 0). */
export function select(x: Tensor, dim: number, index: number): Tensor {
  const d = normDim(dim, x.ndim);
  const size = x.shape[d]!;
  if (index < -size || index >= size)
    throw new IndexError(
      `select(): index ${index} out of range for tensor of size ${shapeStr(x.shape)} at dimension ${d}`,
    );
  const i = index < 0 ? index + size : index;
  const shape = x.shape.filter((_, k) => k !== d);
  const strides = x.strides.filter((_, k) => k !== d);
  const out = makeView(x, shape, strides, x.offset + i * x.strides[d]!);
  return recordOp("SelectBackward0", out, [x], (g) => {
    const z = raw.empty(x.shape, g.dtype, g.device);
    const zs = contiguousStrides(x.shape);
    raw.copyInto(
      raw.asStrided(
        z,
        shape,
        zs.filter((_, k) => k !== d),
        i * zs[d]!,
      ),
      g,
    );
    return [z];
  });
}

/** Broadcast view to `shape` (-1 keeps a dim), as torch.expand. */
export function expand(x: Tensor, shape: readonly number[]): Tensor {
  const lead = shape.length - x.ndim;
  const target = shape.map((s, i) => (s === -1 ? (i < lead ? NaN : x.shape[i - lead]!) : s));
  if (target.some(Number.isNaN))
    throw new ShapeError("expand(): -1 is not allowed in a leading, non-existing dimension");
  const out = asView(raw.expandTo(x, target), x);
  if (out === x) return x;
  return recordOp("ExpandBackward0", out, [x], (g) => [raw.sumToShape(g, x.shape)]);
}

export function squeeze(x: Tensor, dim?: number): Tensor {
  const dims = dim === undefined ? x.shape.map((_, i) => i) : [normDim(dim, x.ndim)];
  const out = asView(raw.squeezeDims(x, dims), x);
  return recordOp("SqueezeBackward0", out, [x], (g) => [reshapeGrad(g, x.shape)]);
}

export function unsqueeze(x: Tensor, dim: number): Tensor {
  const d = normDim(dim, x.ndim + 1);
  const shape = [...x.shape];
  const strides = [...x.strides];
  shape.splice(d, 0, 1);
  strides.splice(d, 0, d < x.ndim ? x.strides[d]! * x.shape[d]! : 1);
  const out = makeView(x, shape, strides, x.offset);
  return recordOp("UnsqueezeBackward0", out, [x], (g) => [reshapeGrad(g, x.shape)]);
}

export function contiguous(x: Tensor): Tensor {
  if (x.isContiguous()) return x;
  return clone(x);
}

export function clone(x: Tensor): Tensor {
  return recordOp("CloneBackward0", raw.copyAs(x), [x], (g) => [g]);
}

/** A tensor sharing storage that is cut off from the graph. */
export function detach(x: Tensor): Tensor {
  const out = raw.asStrided(x, x.shape, x.strides, x.offset);
  out.base = x.base ?? x;
  return out;
}

/** Casts to `dtype` (float to float is differentiable). */
export function toDType(x: Tensor, dtype: DType): Tensor {
  if (x.dtype === dtype) return x;
  const out = raw.copyAs(x, dtype);
  if (!out.isFloatingPoint()) return out;
  return recordOp("ToCopyBackward0", out, [x], (g) => [raw.cast(g, x.dtype)]);
}

export function cat(tensors: readonly Tensor[], dim = 0): Tensor {
  if (tensors.length === 0) throw new ShapeError("cat(): expected a non-empty list of Tensors");
  // NB: as torch, 1-D empty tensors are skipped (legacy behaviour many scripts rely on).
  const parts = tensors.filter((t) => !(t.ndim === 1 && t.numel() === 0));
  if (parts.length === 0) return raw.copyAs(tensors[0]!);
  const ref = parts[0]!;
  const d = normDim(dim, ref.ndim);
  let dtype = ref.dtype;
  for (const [i, p] of parts.entries()) {
    if (p.ndim !== ref.ndim)
      throw new ShapeError(`cat(): Tensors must have same number of dimensions: got ${ref.ndim} and ${p.ndim}`);
    for (let k = 0; k < ref.ndim; k++)
      if (k !== d && p.shape[k] !== ref.shape[k])
        throw new ShapeError(
          `cat(): Sizes of tensors must match except in dimension ${d}. Expected size ${ref.shape[k]} but got size ${p.shape[k]} for tensor number ${i} in the list.`,
        );
    dtype = promoteTypes(dtype, p.dtype);
  }
  const shape = [...ref.shape];
  shape[d] = parts.reduce((s, p) => s + p.shape[d]!, 0);
  const out = raw.empty(shape, dtype, ref.device);
  const strides = contiguousStrides(shape);
  let at = 0;
  const starts: number[] = [];
  for (const p of parts) {
    starts.push(at);
    const sub = [...shape];
    sub[d] = p.shape[d]!;
    raw.copyInto(raw.asStrided(out, sub, strides, at * strides[d]!), p);
    at += p.shape[d]!;
  }
  return recordOp("CatBackward0", out, parts, (g) =>
    parts.map((p, i) => {
      const sub = [...g.shape];
      sub[d] = p.shape[d]!;
      const v = raw.asStrided(g, sub, g.strides, g.offset + starts[i]! * g.strides[d]!);
      return p.dtype === g.dtype ? v : raw.cast(v, p.dtype);
    }),
  );
}

export function stack(tensors: readonly Tensor[], dim = 0): Tensor {
  if (tensors.length === 0) throw new ShapeError("stack expects a non-empty list of Tensors");
  const ref = tensors[0]!;
  for (const [i, t] of tensors.entries())
    if (t.ndim !== ref.ndim || t.shape.some((s, k) => s !== ref.shape[k]))
      throw new ShapeError(
        `stack expects each tensor to be equal size, but got ${shapeStr(ref.shape)} at entry 0 and ${shapeStr(t.shape)} at entry ${i}`,
      );
  const d = normDim(dim, ref.ndim + 1);
  return cat(
    tensors.map((t) => unsqueeze(t, d)),
    d,
  );
}

/** Splits into chunks of `size` (or the given sizes) along dim, as views. */
export function split(x: Tensor, sizeOrSections: number | readonly number[], dim = 0): Tensor[] {
  const d = normDim(dim, x.ndim);
  const total = x.shape[d]!;
  let sizes: number[];
  if (typeof sizeOrSections === "number") {
    if (sizeOrSections <= 0) throw new ShapeError(`split(): split_size must be positive, got ${sizeOrSections}`);
    sizes = [];
    for (let s = 0; s < total; s += sizeOrSections) sizes.push(Math.min(sizeOrSections, total - s));
    if (sizes.length === 0) sizes.push(0);
  } else {
    sizes = [...sizeOrSections];
    const sum = sizes.reduce((a, b) => a + b, 0);
    if (sum !== total)
      throw new ShapeError(
        `split_with_sizes expects split_sizes to sum exactly to ${total} (input tensor's size at dimension ${d}), but got split_sizes=[${sizes.join(", ")}]`,
      );
  }
  let at = 0;
  return sizes.map((s) => {
    const v = narrow(x, d, at, s);
    at += s;
    return v;
  });
}

export function chunk(x: Tensor, chunks: number, dim = 0): Tensor[] {
  if (!Number.isInteger(chunks) || chunks <= 0)
    throw new ShapeError(`chunk expects \`chunks\` to be greater than 0, got: ${chunks}`);
  const size = x.shape[normDim(dim, x.ndim)]!;
  return split(x, Math.max(1, Math.ceil(size / chunks)), dim);
}

export function checkSameDType(a: Tensor, b: Tensor, what: string): void {
  if (a.dtype !== b.dtype)
    throw new DTypeError(`${what}: expected both tensors to have dtype ${a.dtype}, got ${b.dtype}`);
}
