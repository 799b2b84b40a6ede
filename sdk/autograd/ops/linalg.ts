/**
 * Matrix products with their gradient rules. matmul follows torch.matmul's
 * rank rules (1-D operands promoted then squeezed, batch dims broadcast);
 * the backward re-adds the squeezed dims and sums broadcast batch dims away.
 */
import { ShapeError } from "../../errors/index.js";
import { arraysEqual } from "../../util/index.js";
import * as raw from "../../tensor/raw.js";
import { contiguousStrides } from "../../tensor/shape.js";
import type { Tensor } from "../../tensor/tensor.js";
import { recordOp } from "../function.js";

function viewAs(t: Tensor, shape: readonly number[]): Tensor {
  // NB: the matmul kernels take any strides, so a tensor already of this shape needs no copy
  if (arraysEqual(t.shape, shape)) return t;
  const c = raw.contiguous(t);
  return raw.asStrided(c, shape, contiguousStrides(shape), c.offset);
}

function mT(t: Tensor): Tensor {
  const r = t.ndim;
  const shape = [...t.shape];
  const strides = [...t.strides];
  [shape[r - 2], shape[r - 1]] = [shape[r - 1]!, shape[r - 2]!];
  [strides[r - 2], strides[r - 1]] = [strides[r - 1]!, strides[r - 2]!];
  return raw.asStrided(t, shape, strides, t.offset);
}

export function matmul(a: Tensor, b: Tensor): Tensor {
  const out = raw.matmul(a, b);
  return recordOp(
    "MmBackward0",
    out,
    [a, b],
    (g, needs) => {
      const a2 = a.ndim === 1 ? viewAs(a, [1, a.shape[0]!]) : a;
      const b2 = b.ndim === 1 ? viewAs(b, [b.shape[0]!, 1]) : b;
      // the gradient in the promoted (>= 2-D) form: [...batch, m, n]
      const batch = out.shape.slice(0, Math.max(0, out.ndim - (a.ndim === 1 ? 0 : 1) - (b.ndim === 1 ? 0 : 1)));
      const g2 = viewAs(g, [...batch, a2.shape[a2.ndim - 2]!, b2.shape[b2.ndim - 1]!]);
      const ga = needs[0] ? viewAs(raw.sumToShape(raw.matmul(g2, mT(b2)), a2.shape), a.shape) : null;
      const gb = needs[1] ? viewAs(raw.sumToShape(raw.matmul(mT(a2), g2), b2.shape), b.shape) : null;
      return [ga, gb];
    },
    [a, b],
  );
}

/**
 * x Wᵀ + b for 2-D x [m, in], W [out, in] and b [out] (or null) of one dtype, as one node (torch's
 * addmm path of F.linear): the bias rides in the GEMM, and the backward is two products and a sum.
 */
export function linear2d(x: Tensor, w: Tensor, b: Tensor | null): Tensor {
  const wT = mT(w);
  const out = b ? raw.addmm(b, x, wT) : raw.matmul(x, wT);
  return recordOp(
    b ? "AddmmBackward0" : "MmBackward0",
    out,
    [x, w, b],
    (g, needs) => [
      needs[0] ? raw.matmul(g, w) : null,
      needs[1] ? raw.matmul(mT(g), x) : null,
      needs[2] ? raw.reduce("sum", g, [0], false) : null,
    ],
    [x, w],
  );
}

/** Batched matrix product of two 3-D tensors with equal batch sizes (no broadcasting), as torch.bmm. */
export function bmm(a: Tensor, b: Tensor): Tensor {
  if (a.ndim !== 3 || b.ndim !== 3)
    throw new ShapeError(`bmm(): expected 3-D tensors, got ${a.ndim}-D and ${b.ndim}-D`);
  if (a.shape[0] !== b.shape[0])
    throw new ShapeError(`bmm(): batch sizes differ: ${a.shape[0]} and ${b.shape[0]} (use matmul to broadcast)`);
  return matmul(a, b);
}

/** 2-D matrix product, as torch.mm. */
export function mm(a: Tensor, b: Tensor): Tensor {
  if (a.ndim !== 2 || b.ndim !== 2) throw new ShapeError(`mm(): expected 2-D tensors, got ${a.ndim}-D and ${b.ndim}-D`);
  return matmul(a, b);
}
