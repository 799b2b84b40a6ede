/**
 * How a differentiable op records itself: compute the output with raw ops,
 * then `recordOp(name, out, inputs, backward, saved)`. The backward closure is
 * written right beside the forward and returns one gradient per input (null
 * for inputs that are not tensors or need none). Nothing is recorded in
 * noGrad mode or when no input requires grad.
 */
import { itemSize } from "../tensor/dtype.js";
import * as raw from "../tensor/raw.js";
import { Tensor } from "../tensor/tensor.js";
import { isGradEnabled } from "./grad_mode.js";
import { type BackwardFn, FunctionNode, gradEdge } from "./node.js";

export type Operand = raw.Operand;

export function needsGrad(inputs: readonly unknown[]): boolean {
  return isGradEnabled() && inputs.some((i) => i instanceof Tensor && i.requiresGrad);
}

/** Bytes of the tensors among `ts`. */
function tensorBytes(ts: readonly unknown[]): number {
  let bytes = 0;
  for (const t of ts) if (t instanceof Tensor) bytes += t.numel() * itemSize(t.dtype);
  return bytes;
}

/** Gives `out` the graph node of the op that computed it from `inputs` (when one needs grad); returns `out`. */
export function recordOp(
  name: string,
  out: Tensor,
  inputs: readonly unknown[],
  backward: BackwardFn,
  saved: readonly Tensor[] = [],
): Tensor {
  if (!needsGrad(inputs)) return out;
  const edges = inputs.map((i) => (i instanceof Tensor ? gradEdge(i) : null));
  const bytes = tensorBytes(inputs) + tensorBytes(saved) + out.numel() * itemSize(out.dtype);
  out.gradFn = new FunctionNode(name, edges, backward, saved, bytes);
  return out;
}

/** Marks `out` as a view of `of` (shares storage), for the in-place checks. */
export function asView(out: Tensor, of: Tensor): Tensor {
  out.base = of.base ?? of;
  return out;
}

/**
 * recordOp for user code (exported as autograd.recordOp): the same, but the engine never recycles
 * the gradient handed to such a node's backward (a user's closure may keep it; see engine.ts).
 */
export function recordCustomOp(
  name: string,
  out: Tensor,
  inputs: readonly unknown[],
  backward: BackwardFn,
  saved: readonly Tensor[] = [],
): Tensor {
  if (!needsGrad(inputs)) return out;
  recordOp(name, out, inputs, backward, saved);
  (out.gradFn as FunctionNode).custom = true;
  return out;
}
