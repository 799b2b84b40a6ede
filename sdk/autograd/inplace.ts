/**
 * In-place variants (add_, mul_, clamp_, ...). The result is computed by the
 * out-of-place op (recording its node), written into self's storage (bumping
 * the version counter shared by every view, so stale saved tensors are
 * caught at backward) and self takes over the result's gradFn — PyTorch's
 * "rebase history". Refused, as in PyTorch: in-place on a leaf that requires
 * grad while grad mode is on, and results that can't be cast to self's dtype.
 *
 * Fast path (directBinary, directFill): when no graph is recorded (grad mode off, or neither
 * operand requires grad), the common arithmetic ones (the optimizers' mul_, add_, fills) compute
 * straight into self's storage: one kernel, no result tensor, no copy back.
 */
import { AutogradError, DTypeError, NotImplementedError, ShapeError } from "../errors/index.js";
import { arraysEqual } from "../util/index.js";
import { canCast, isFloating } from "../tensor/dtype.js";
import { getBackend } from "../tensor/backend/registry.js";
import * as raw from "../tensor/raw.js";
import { Tensor } from "../tensor/tensor.js";
import { isGradEnabled } from "./grad_mode.js";

export function inplace(self: Tensor, compute: () => Tensor): Tensor {
  leafCheck(self);
  const r = compute();
  if (!arraysEqual(r.shape, self.shape))
    throw new ShapeError(
      `output with shape [${self.shape.join(", ")}] doesn't match the broadcast shape [${r.shape.join(", ")}]`,
    );
  if (!canCast(r.dtype, self.dtype))
    throw new DTypeError(`result type ${r.dtype} can't be cast to the desired output type ${self.dtype}`);
  if (r.gradFn && self.base)
    throw new NotImplementedError(
      "in-place ops that record a gradient are not supported on views yet (the base tensor would not see the change); " +
        "use the out-of-place op (y = x.add(z)) or clone() the view first",
    );
  raw.copyInto(self, r);
  if (r.gradFn) self.gradFn = r.gradFn;
  return self;
}

function leafCheck(self: Tensor): void {
  if (isGradEnabled() && self.isLeaf && self.requiresGrad)
    throw new AutogradError(
      "a leaf Variable that requires grad is being used in an in-place operation. " +
        "Wrap parameter updates in noGrad(() => ...), or use the out-of-place op.",
    );
}

/** Whether `o` broadcasts to `shape` without changing it. */
function broadcastsTo(o: Tensor, shape: readonly number[]): boolean {
  const lead = shape.length - o.ndim;
  if (lead < 0) return false;
  for (let i = 0; i < o.ndim; i++) if (o.shape[i] !== 1 && o.shape[i] !== shape[lead + i]) return false;
  return true;
}

/**
 * `self op= alpha * o` written straight into self when nothing is recorded and nothing needs a
 * cast of the result, a broadcast of self or a temporary copy of an overlapping operand; null
 * when the general path (inplace) must run (it also gives the errors).
 */
export function directBinary(self: Tensor, op: "add" | "sub" | "mul" | "div", o: unknown, alpha = 1): Tensor | null {
  const isT = o instanceof Tensor;
  if (!isT && typeof o !== "number") return null;
  if (isGradEnabled() && (self.requiresGrad || (isT && o.requiresGrad))) return null;
  if (!isFloating(self.dtype) || !self.isContiguous()) return null;
  if (isT) {
    if (!o.device.equals(self.device) || !broadcastsTo(o, self.shape)) return null;
    // NB: an operand over the same memory is fine only as the very same view (read before written)
    if (
      o.storage === self.storage &&
      (o.offset !== self.offset || !arraysEqual(o.strides, self.strides) || !arraysEqual(o.shape, self.shape))
    )
      return null;
  }
  if (raw.resultType(self, o as raw.Operand) !== self.dtype) return null;
  let b: Tensor;
  if (isT) {
    let c = raw.cast(o, self.dtype);
    if (alpha !== 1) c = raw.binary("mul", c, alpha, self.dtype);
    b = raw.expandTo(c, self.shape);
  } else {
    b = raw.expandTo(raw.scalarTensor((o as number) * alpha, self.dtype, self.device), self.shape);
  }
  getBackend().binary(op, self, b, self);
  self.storage.version++;
  return self;
}

/** fill_ / zero_: writes `v` into self's elements (any view); gradFn is kept as the general path keeps it. */
export function directFill(self: Tensor, v: number): Tensor {
  leafCheck(self);
  raw.copyInto(self, v);
  return self;
}
