/**
 * Reductions with their gradient rules: sum, mean, max/min (whole tensor or
 * along a dim, with indices), argmax/argmin, logsumexp, prod, var/std.
 * `dims` may be a number, a list, or undefined for all dims.
 */
import { DTypeError } from "../../errors/index.js";
import { type DType, getDefaultDType, isFloating } from "../../tensor/dtype.js";
import * as raw from "../../tensor/raw.js";
import { contiguousStrides, normDim, normDims } from "../../tensor/shape.js";
import { Tensor } from "../../tensor/tensor.js";
import { toDevice } from "../../tensor/device_copy.js";
import { recordOp } from "../function.js";
import { div, mul, sub } from "./elementwise.js";

export type Dims = number | readonly number[] | undefined;

/** Reshapes a reduced gradient back to keepdim form, then broadcasts it to `shape`. */
function expandBack(g: Tensor, shape: readonly number[], dims: readonly number[], keepdim: boolean): Tensor {
  if (keepdim) return raw.expandTo(g, shape);
  const kept = shape.map((d, i) => (dims.includes(i) ? 1 : d));
  return raw.expandTo(reshapeContig(g, kept), shape);
}

/** A contiguous tensor re-viewed with a new shape of the same size. */
function reshapeContig(t: Tensor, shape: readonly number[]): Tensor {
  const c = raw.contiguous(t);
  return raw.asStrided(c, shape, contiguousStrides(shape), c.offset);
}

export function sum(x: Tensor, dims?: Dims, keepdim = false, opts: { dtype?: DType } = {}): Tensor {
  const d = normDims(dims, x.ndim);
  const src = opts.dtype ? raw.cast(x, opts.dtype) : x;
  const out = raw.reduce("sum", src, d, keepdim);
  return recordOp("SumBackward1", out, [x], (g) => [raw.cast(expandBack(g, x.shape, d, keepdim), x.dtype)]);
}

export function mean(x: Tensor, dims?: Dims, keepdim = false): Tensor {
  if (!isFloating(x.dtype))
    throw new DTypeError(
      `mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: ${x.dtype}`,
    );
  const d = normDims(dims, x.ndim);
  const n = d.reduce((p, i) => p * x.shape[i]!, 1);
  return div(sum(x, d, keepdim), n);
}

/** Variance with Bessel's correction by default (correction = 1), as torch.var. */
export function variance(x: Tensor, dims?: Dims, opts: { correction?: number; keepdim?: boolean } = {}): Tensor {
  const d = normDims(dims, x.ndim);
  const n = d.reduce((p, i) => p * x.shape[i]!, 1);
  const centered = sub(x, mean(x, d, true));
  const ss = sum(mul(centered, centered), d, opts.keepdim ?? false);
  return div(ss, Math.max(0, n - (opts.correction ?? 1)));
}

export function std(x: Tensor, dims?: Dims, opts: { correction?: number; keepdim?: boolean } = {}): Tensor {
  const v = variance(x, dims, opts);
  const out = raw.floatUnary("sqrt", v);
  return recordOp("SqrtBackward0", out, [v], (g) => [raw.binary("div", g, raw.binary("mul", out, 2))], [out]);
}

export interface ValuesIndices {
  values: Tensor;
  indices: Tensor;
}

function extremeAll(op: "max" | "min", x: Tensor): Tensor {
  const all = normDims(undefined, x.ndim);
  const out = raw.reduce(op, x, all, false);
  return recordOp(
    op === "max" ? "MaxBackward1" : "MinBackward1",
    out,
    [x],
    (g) => {
      // evenly distribute among ties, as torch does for full reductions
      const hit = raw.cast(raw.binary("eq", x, out), g.dtype);
      const count = raw.reduce("sum", hit, all, false);
      return [raw.binary("mul", hit, raw.binary("div", g, count))];
    },
    [x, out],
  );
}

function extremeDim(op: "max" | "min", x: Tensor, dim: number, keepdim: boolean): ValuesIndices {
  const d = normDim(dim, x.ndim);
  const indicesK = raw.argReduce(op === "max" ? "argmax" : "argmin", x, d, true);
  const valuesK = raw.gather(x, d, indicesK);
  const values = keepdim ? valuesK : raw.squeezeDims(valuesK, [d]);
  const indices = keepdim ? indicesK : raw.squeezeDims(indicesK, [d]);
  recordOp(
    op === "max" ? "MaxBackward0" : "MinBackward0",
    values,
    [x],
    (g) => {
      const gk = keepdim ? g : reshapeContig(g, indicesK.shape);
      return [raw.scatterAdd(raw.empty(x.shape, g.dtype, g.device), d, indicesK, gk)];
    },
    [indicesK],
  );
  return { values, indices };
}

export function max(x: Tensor): Tensor;
export function max(x: Tensor, dim: number, keepdim?: boolean): ValuesIndices;
export function max(x: Tensor, dim?: number, keepdim = false): Tensor | ValuesIndices {
  return dim === undefined ? extremeAll("max", x) : extremeDim("max", x, dim, keepdim);
}

export function min(x: Tensor): Tensor;
export function min(x: Tensor, dim: number, keepdim?: boolean): ValuesIndices;
export function min(x: Tensor, dim?: number, keepdim = false): Tensor | ValuesIndices {
  return dim === undefined ? extremeAll("min", x) : extremeDim("min", x, dim, keepdim);
}

/** Max over dims (no indices), as torch.amax. */
export function amax(x: Tensor, dims?: Dims, keepdim = false): Tensor {
  const d = normDims(dims, x.ndim);
  const out = raw.reduce("max", x, d, keepdim);
  return recordOp(
    "AmaxBackward0",
    out,
    [x],
    (g) => {
      const outK = expandBack(out, x.shape, d, keepdim);
      const hit = raw.cast(raw.binary("eq", x, outK), g.dtype);
      const count = raw.reduce("sum", hit, d, true);
      return [raw.binary("div", raw.binary("mul", hit, expandBack(g, x.shape, d, keepdim)), count)];
    },
    [x, out],
  );
}

export function argmax(x: Tensor, dim?: number, keepdim = false): Tensor {
  if (dim === undefined) return raw.argReduce("argmax", reshapeContig(x, [x.numel()]), 0, false);
  return raw.argReduce("argmax", x, normDim(dim, x.ndim), keepdim);
}

export function argmin(x: Tensor, dim?: number, keepdim = false): Tensor {
  if (dim === undefined) return raw.argReduce("argmin", reshapeContig(x, [x.numel()]), 0, false);
  return raw.argReduce("argmin", x, normDim(dim, x.ndim), keepdim);
}

/** log(sum(exp(x))) over dims, computed stably. */
export function logsumexp(x: Tensor, dims: Dims, keepdim = false): Tensor {
  const xf = isFloating(x.dtype) ? x : raw.cast(x, getDefaultDType());
  const d = normDims(dims, x.ndim);
  let m = raw.reduce("max", xf, d, true);
  m = raw.where(raw.unary("isnan", raw.binary("sub", m, m), [], "bool"), 0, m); // inf - inf: no shift
  const s = raw.reduce("sum", raw.unary("exp", raw.binary("sub", xf, m)), d, true);
  const outK = raw.binary("add", raw.unary("log", s), m);
  const out = keepdim ? outK : raw.squeezeDims(outK, d);
  return recordOp(
    "LogsumexpBackward0",
    out,
    [x],
    (g) => [raw.binary("mul", expandBack(g, x.shape, d, keepdim), raw.unary("exp", raw.binary("sub", xf, outK)))],
    [x, out],
  );
}

/** Product over all elements or along one dim. */
export function prod(x: Tensor, dim?: number, keepdim = false): Tensor {
  const d = dim === undefined ? normDims(undefined, x.ndim) : [normDim(dim, x.ndim)];
  const kd = dim === undefined ? false : keepdim;
  const out = raw.reduce("prod", x, d, kd);
  return recordOp(
    "ProdBackward0",
    out,
    [x],
    (g) => {
      // d prod / d x_i = product of the other elements of its slice (exact, zeros included)
      const xs = raw.contiguous(raw.cast(x, g.dtype));
      const vals = xs.toArray();
      const res = new Float64Array(vals.length);
      const outer = x.shape.map((s, i) => (d.includes(i) ? 1 : s));
      const slices = new Map<number, number[]>();
      const strides = contiguousStrides(x.shape);
      const oStrides = contiguousStrides(outer);
      for (let i = 0; i < vals.length; i++) {
        let rem = i;
        let key = 0;
        for (let k = 0; k < x.ndim; k++) {
          const c = Math.floor(rem / strides[k]!);
          rem -= c * strides[k]!;
          if (!d.includes(k)) key += c * oStrides[k]!;
        }
        let list = slices.get(key);
        if (!list) slices.set(key, (list = []));
        list.push(i);
      }
      for (const list of slices.values()) {
        for (const i of list) {
          let p = 1;
          for (const j of list) if (j !== i) p *= vals[j]!;
          res[i] = p;
        }
      }
      const others = raw.newStorageTensor(x.shape, "float64");
      (others.storage.data as Float64Array).set(res);
      // NB: the products are found on the host; a CUDA input gets them back on its device
      const o = toDevice(raw.cast(others, g.dtype), x.device);
      return [raw.binary("mul", expandBack(g, x.shape, d, kd), o)];
    },
    [x],
  );
}
