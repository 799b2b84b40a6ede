/**
 * Shape arithmetic: contiguous strides, dim normalisation, broadcasting.
 * Errors read like PyTorch's so users recognise them.
 */
import { IndexError, ShapeError } from "../errors/index.js";

export type Shape = readonly number[];

export function contiguousStrides(shape: Shape): number[] {
  const strides = new Array<number>(shape.length);
  let s = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    strides[i] = s;
    s *= Math.max(shape[i]!, 1);
  }
  return strides;
}

export function numelOf(shape: Shape): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/** Wraps a possibly negative dim into [0, rank); rank 0 accepts -1 and 0 as PyTorch does. */
export function normDim(dim: number, rank: number): number {
  const r = Math.max(rank, 1);
  if (!Number.isInteger(dim) || dim < -r || dim >= r)
    throw new IndexError(`Dimension out of range (expected to be in range of [${-r}, ${r - 1}], but got ${dim})`);
  return dim < 0 ? dim + r : dim;
}

export function normDims(dims: number | readonly number[] | undefined, rank: number): number[] {
  if (dims === undefined) return [...Array(rank).keys()];
  const list = typeof dims === "number" ? [dims] : [...dims];
  const out = list.map((d) => normDim(d, rank));
  if (new Set(out).size !== out.length) throw new IndexError(`dim ${dims} appears multiple times in the list of dims`);
  return out.sort((a, b) => a - b);
}

/** Broadcasts shapes as NumPy and PyTorch do, or throws a ShapeError naming both sizes. */
export function broadcastShapes(...shapes: Shape[]): number[] {
  const rank = Math.max(0, ...shapes.map((s) => s.length));
  const out = new Array<number>(rank).fill(1);
  for (const s of shapes) {
    for (let i = 0; i < s.length; i++) {
      const o = rank - s.length + i;
      const d = s[i]!;
      if (d === out[o] || d === 1) continue;
      if (out[o] === 1) {
        out[o] = d;
        continue;
      }
      throw new ShapeError(
        `The size of tensor a (${out[o]}) must match the size of tensor b (${d}) at non-singleton dimension ${i}` +
          ` (shapes ${shapes.map((x) => `[${x.join(", ")}]`).join(" and ")} do not broadcast)`,
      );
    }
  }
  return out;
}

/** Strides that view `shape`/`strides` as the broadcast `target` shape (stride 0 on expanded dims). */
export function expandStrides(shape: Shape, strides: readonly number[], target: Shape): number[] {
  const out = new Array<number>(target.length).fill(0);
  const lead = target.length - shape.length;
  if (lead < 0)
    throw new ShapeError(
      `expand: the number of sizes provided (${target.length}) must be greater or equal to the number of dimensions in the tensor (${shape.length})`,
    );
  for (let i = 0; i < shape.length; i++) {
    const d = shape[i]!;
    const t = target[lead + i]!;
    if (d === t) out[lead + i] = strides[i]!;
    else if (d === 1) out[lead + i] = 0;
    else
      throw new ShapeError(
        `The expanded size of the tensor (${t}) must match the existing size (${d}) at non-singleton dimension ${lead + i}.  Target sizes: [${target.join(", ")}].  Tensor sizes: [${shape.join(", ")}]`,
      );
  }
  return out;
}

/** Resolves a single -1 in a view/reshape shape. */
export function inferShape(shape: readonly number[], numel: number): number[] {
  const out = [...shape];
  const neg = out.indexOf(-1);
  if (out.filter((d) => d === -1).length > 1) throw new ShapeError("only one dimension can be inferred");
  for (const d of out) if (d < -1 || !Number.isInteger(d)) throw new ShapeError(`invalid shape dimension ${d}`);
  if (neg >= 0) {
    const rest = out.reduce((p, d, i) => (i === neg ? p : p * d), 1);
    if (rest === 0 || numel % rest !== 0)
      throw new ShapeError(`shape '[${shape.join(", ")}]' is invalid for input of size ${numel}`);
    out[neg] = numel / rest;
  }
  if (numelOf(out) !== numel)
    throw new ShapeError(`shape '[${shape.join(", ")}]' is invalid for input of size ${numel}`);
  return out;
}

/**
 * Strides for viewing (shape, strides) as newShape without a copy, or null when
 * the memory layout does not allow it (then reshape copies; view throws).
 */
export function viewStrides(shape: Shape, strides: readonly number[], newShape: Shape): number[] | null {
  const numel = numelOf(shape);
  if (numel === 0 || shape.length === 0) return contiguousStrides(newShape);
  // Group old dims into contiguous chunks and map new dims onto them (as ATen's computeStride).
  const out = new Array<number>(newShape.length);
  let viewD = newShape.length - 1;
  let chunkBase = strides[strides.length - 1] ?? 1;
  let tensorNumel = 1;
  let viewNumel = 1;
  for (let d = shape.length - 1; d >= 0; d--) {
    tensorNumel *= shape[d]!;
    if (d === 0 || (shape[d - 1] !== 1 && strides[d - 1] !== tensorNumel * chunkBase)) {
      while (viewD >= 0 && (viewNumel < tensorNumel || newShape[viewD] === 1)) {
        out[viewD] = viewNumel * chunkBase;
        viewNumel *= newShape[viewD]!;
        viewD--;
      }
      if (viewNumel !== tensorNumel) return null;
      if (d > 0) {
        chunkBase = strides[d - 1]!;
        tensorNumel = 1;
        viewNumel = 1;
      }
    }
  }
  if (viewD !== -1) return null;
  return out;
}

export function isContiguous(shape: Shape, strides: readonly number[]): boolean {
  let expected = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    if (shape[i] === 1) continue;
    if (strides[i] !== expected) return false;
    expected *= shape[i]!;
  }
  return true;
}

export function shapeStr(shape: Shape): string {
  return `[${shape.join(", ")}]`;
}
