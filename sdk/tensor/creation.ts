/**
 * Creation ops: tensor() from nested arrays, typed arrays or scalars; zeros,
 * ones, full, arange, linspace, eye; random (rand, randn, randint,
 * multinomial) from the seeded generator. None of them records a graph; the
 * `requiresGrad` option makes the result a leaf that requires grad.
 */
import { ShapeError, ValueError } from "../errors/index.js";
import { writerOf } from "./access.js";
import { type DType, getDefaultDType, checkDType } from "./dtype.js";
import { Device, type DeviceLike, assertDeviceUsable, cpu } from "./device.js";
import { toDevice } from "./device_copy.js";
import { defaultGenerator, type Generator } from "./random.js";
import { contiguousStrides, numelOf, type Shape } from "./shape.js";
import { Storage } from "./storage.js";
import { Tensor, type NestedArray } from "./tensor.js";
import { getBackend } from "./backend/registry.js";
import { deviceKernelsFor } from "./backend/router.js";

export interface TensorOptions {
  dtype?: DType;
  /** "cpu" (default), "cuda:N", N or a Device; a CUDA device needs a viable CUDA backend (DeviceError otherwise). */
  device?: DeviceLike;
  requiresGrad?: boolean;
}

export interface RandomOptions extends TensorOptions {
  generator?: Generator;
}

type TypedInput = Float32Array | Float64Array | Int32Array | BigInt64Array | Uint8Array;
export type TensorData = NestedArray<number | boolean> | TypedInput | Tensor;

function finish(t: Tensor, opts: TensorOptions): Tensor {
  const d = Device.parse(opts.device);
  if (d.type !== "cpu") t = toDevice(t, d);
  if (opts.requiresGrad) t.requiresGrad_(true);
  return t;
}

/** Checks opts.device before any work and returns where values are built: the host (finish() moves them). */
function resolveDevice(opts: TensorOptions): Device {
  assertDeviceUsable(Device.parse(opts.device));
  return cpu;
}

function fromFlat(values: ArrayLike<number>, shape: Shape, dtype: DType, device: Device): Tensor {
  const s = Storage.alloc(dtype, values.length, device);
  const write = writerOf(s);
  for (let i = 0; i < values.length; i++) write(i, values[i]!);
  return new Tensor(s, [...shape], contiguousStrides(shape), 0);
}

function typedDType(a: TypedInput): DType {
  if (a instanceof Float32Array) return "float32";
  if (a instanceof Float64Array) return "float64";
  if (a instanceof Int32Array) return "int32";
  if (a instanceof BigInt64Array) return "int64";
  return "uint8";
}

/**
 * A new tensor from data, as torch.tensor: nested arrays (bools give bool,
 * integers int64, otherwise the default float dtype), a typed array (its own
 * dtype, 1-D; reshape after), a scalar (0-dim) or a Tensor (copied).
 */
export function tensor(data: TensorData, opts: TensorOptions = {}): Tensor {
  const device = resolveDevice(opts);
  if (opts.dtype) checkDType(opts.dtype);
  if (data instanceof Tensor) {
    const out = Tensor.empty(data.shape, opts.dtype ?? data.dtype, device);
    getBackend().copy(data, out);
    return finish(out, opts);
  }
  if (ArrayBuffer.isView(data)) {
    const src = data as TypedInput;
    const dtype = opts.dtype ?? typedDType(src);
    if (src instanceof BigInt64Array) {
      const s = Storage.alloc(dtype, src.length, device);
      if (dtype === "int64") (s.data as BigInt64Array).set(src);
      else {
        const w = writerOf(s);
        for (let i = 0; i < src.length; i++) w(i, Number(src[i]!));
      }
      return finish(new Tensor(s, [src.length], [1], 0), opts);
    }
    return finish(fromFlat(src as ArrayLike<number>, [src.length], dtype, device), opts);
  }
  const shape: number[] = [];
  let probe: NestedArray<number | boolean> = data;
  while (Array.isArray(probe)) {
    shape.push(probe.length);
    if (probe.length === 0) break;
    probe = probe[0]!;
  }
  const flat: number[] = [];
  let allBool = true;
  let allInt = true;
  const walk = (x: NestedArray<number | boolean>, d: number): void => {
    if (d === shape.length) {
      if (Array.isArray(x)) throw new ShapeError(`tensor(): expected a number at depth ${d}, got a nested array`);
      if (typeof x === "boolean") flat.push(x ? 1 : 0);
      else if (typeof x === "number") {
        allBool = false;
        if (!Number.isInteger(x)) allInt = false;
        flat.push(x);
      } else throw new ValueError(`tensor(): expected numbers or booleans, got ${typeof x}`);
      return;
    }
    if (!Array.isArray(x) || x.length !== shape[d])
      throw new ShapeError(
        `tensor(): expected sequence of length ${shape[d]} at dim ${d} (got ${Array.isArray(x) ? x.length : "a scalar"}); nested arrays must be rectangular`,
      );
    for (const y of x) walk(y, d + 1);
  };
  walk(data, 0);
  const inferred: DType =
    flat.length === 0 ? getDefaultDType() : allBool ? "bool" : allInt ? "int64" : getDefaultDType();
  return finish(fromFlat(flat, shape, opts.dtype ?? inferred, device), opts);
}

function shapeArg(shape: Shape | number, rest: number[]): number[] {
  const s = typeof shape === "number" ? [shape, ...rest] : [...shape];
  for (const d of s)
    if (!Number.isInteger(d) || d < 0)
      throw new ValueError(`Trying to create tensor with negative dimension ${d}: [${s.join(", ")}]`);
  return s;
}

function filled(shape: Shape, value: number, dtype: DType, opts: TensorOptions): Tensor {
  // NB: built on its device directly (a fill kernel there) where it has kernels, else on the host and moved
  const device = Device.parse(opts.device);
  assertDeviceUsable(device);
  if (value !== 0 && device.type !== "cpu" && !deviceKernelsFor(device.type))
    return finish(filled(shape, value, dtype, { ...opts, device: cpu, requiresGrad: false }), opts);
  const t = Tensor.empty(shapeArg(shape, []), dtype, device);
  if (value !== 0) getBackend().fill(t, value);
  if (opts.requiresGrad) t.requiresGrad_(true);
  return t;
}

/** A tensor filled with `value`; the dtype follows the value (bool, int64, default float) as torch.full. */
export function full(shape: Shape, value: number | boolean, opts: TensorOptions = {}): Tensor {
  const inferred: DType = typeof value === "boolean" ? "bool" : Number.isInteger(value) ? "int64" : getDefaultDType();
  return filled(shape, Number(value), opts.dtype ?? inferred, opts);
}

export function zeros(shape: Shape, opts: TensorOptions = {}): Tensor {
  return filled(shape, 0, opts.dtype ?? getDefaultDType(), opts);
}

export function ones(shape: Shape, opts: TensorOptions = {}): Tensor {
  return filled(shape, 1, opts.dtype ?? getDefaultDType(), opts);
}

export function emptyTensor(shape: Shape, opts: TensorOptions = {}): Tensor {
  return zeros(shape, opts);
}

/** Zeros of t's shape, dtype and device (as torch.zeros_like). */
export function zerosLike(t: Tensor, opts: TensorOptions = {}): Tensor {
  return zeros(t.shape, { dtype: t.dtype, device: t.device, ...opts });
}

export function onesLike(t: Tensor, opts: TensorOptions = {}): Tensor {
  return ones(t.shape, { dtype: t.dtype, device: t.device, ...opts });
}

export function fullLike(t: Tensor, value: number, opts: TensorOptions = {}): Tensor {
  return full(t.shape, value, { dtype: t.dtype, device: t.device, ...opts });
}

/** Values from start to end (exclusive) by step; integer arguments give int64, as torch.arange. */
export function arange(start: number, end?: number, step = 1, opts: TensorOptions = {}): Tensor {
  if (end === undefined) {
    end = start;
    start = 0;
  }
  if (step === 0) throw new ValueError("arange(): step must be nonzero");
  if ((end - start) / step < 0)
    throw new ValueError("arange(): upper bound and larger bound inconsistent with step sign");
  const n = Math.ceil((end - start) / step);
  const allInt = [start, end, step].every(Number.isInteger);
  const dtype = opts.dtype ?? (allInt ? "int64" : getDefaultDType());
  const vals = new Float64Array(n);
  for (let i = 0; i < n; i++) vals[i] = start + i * step;
  return finish(fromFlat(vals, [n], dtype, resolveDevice(opts)), opts);
}

export function linspace(start: number, end: number, steps: number, opts: TensorOptions = {}): Tensor {
  if (!Number.isInteger(steps) || steps < 0) throw new ValueError("linspace(): number of steps must be non-negative");
  const vals = new Float64Array(steps);
  const step = steps > 1 ? (end - start) / (steps - 1) : 0;
  // NB: fill symmetric halves from both ends, as torch does, so the last value is exactly `end`.
  const half = Math.floor(steps / 2);
  for (let i = 0; i < steps; i++) vals[i] = i < half ? start + step * i : end - step * (steps - 1 - i);
  return finish(fromFlat(vals, [steps], opts.dtype ?? getDefaultDType(), resolveDevice(opts)), opts);
}

export function eye(n: number, m: number = n, opts: TensorOptions = {}): Tensor {
  const t = zeros([n, m], opts);
  const w = writerOf(t.storage);
  for (let i = 0; i < Math.min(n, m); i++) w(i * m + i, 1);
  return t;
}

function randomFill(shape: Shape, opts: RandomOptions, draw: (g: Generator) => number): Tensor {
  const g = opts.generator ?? defaultGenerator;
  const n = numelOf(shape);
  const vals = new Float64Array(n);
  for (let i = 0; i < n; i++) vals[i] = draw(g);
  return finish(fromFlat(vals, shape, opts.dtype ?? getDefaultDType(), resolveDevice(opts)), opts);
}

/** Uniform [0, 1). */
export function rand(shape: Shape, opts: RandomOptions = {}): Tensor {
  return randomFill(shapeArg(shape, []), opts, (g) => g.random());
}

/** Standard normal. */
export function randn(shape: Shape, opts: RandomOptions = {}): Tensor {
  return randomFill(shapeArg(shape, []), opts, (g) => g.normal());
}

/** Uniform integers in [low, high), int64 by default. */
export function randint(low: number, high: number, shape: Shape, opts: RandomOptions = {}): Tensor {
  if (!(high > low)) throw new ValueError(`randint(): expected low < high, got low=${low}, high=${high}`);
  return randomFill(shapeArg(shape, []), { dtype: "int64", ...opts }, (g) => g.randint(low, high));
}

/** Random permutation of 0..n-1 (int64). */
export function randperm(n: number, opts: RandomOptions = {}): Tensor {
  const g = opts.generator ?? defaultGenerator;
  const p = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = g.randint(0, i + 1);
    [p[i], p[j]] = [p[j]!, p[i]!];
  }
  return finish(fromFlat(p, [n], opts.dtype ?? "int64", resolveDevice(opts)), opts);
}

/**
 * Samples category indices from rows of non-negative weights, as
 * torch.multinomial (1-D gives [numSamples], 2-D gives [rows, numSamples]).
 */
export function multinomial(probs: Tensor, numSamples: number, replacement = false, opts: RandomOptions = {}): Tensor {
  const g = opts.generator ?? defaultGenerator;
  if (probs.ndim < 1 || probs.ndim > 2) throw new ShapeError("multinomial(): prob_dist must be 1 or 2 dim");
  const rows = probs.ndim === 1 ? 1 : probs.shape[0]!;
  const k = probs.shape[probs.ndim - 1]!;
  if (!replacement && numSamples > k)
    throw new ValueError("multinomial(): cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  const w = probs.toArray();
  const out: number[] = [];
  for (let r = 0; r < rows; r++) {
    const row = w.slice(r * k, (r + 1) * k);
    if (row.some((v) => v < 0 || !Number.isFinite(v)))
      throw new ValueError("multinomial(): probability tensor contains either `inf`, `nan` or element < 0");
    for (let s = 0; s < numSamples; s++) {
      const total = row.reduce((a, b) => a + b, 0);
      if (total <= 0)
        throw new ValueError("multinomial(): invalid multinomial distribution (sum of probabilities <= 0)");
      let u = g.random() * total;
      let pick = k - 1;
      for (let i = 0; i < k; i++) {
        u -= row[i]!;
        if (u < 0 && row[i]! > 0) {
          pick = i;
          break;
        }
      }
      out.push(pick);
      if (!replacement) row[pick] = 0;
    }
  }
  const shape = probs.ndim === 1 ? [numSamples] : [rows, numSamples];
  return finish(fromFlat(out, shape, "int64", resolveDevice(opts)), { device: opts.device });
}
