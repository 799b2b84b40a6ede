/**
 * In-place variants (add_, mul_, clamp_, ...). The result is computed by the
 * out-of-place op (recording its node), written into self's storage (bumping
 * the version counter shared by every view, so stale saved tensors are
 * caught at backward) and self takes over the result's gradFn — PyTorch's
 * "rebase history". Refused, as in PyTorch: in-place on a leaf that requires
 * grad while grad mode is on, and results that can't be cast to self's dtype.
 */
import { AutogradError, DTypeError, NotImplementedError, ShapeError } from "../errors/index.js";
import { arraysEqual } from "../util/index.js";
import { canCast } from "../tensor/dtype.js";
import * as raw from "../tensor/raw.js";
import type { Tensor } from "../tensor/tensor.js";
import { isGradEnabled } from "./grad_mode.js";

export function inplace(self: Tensor, compute: () => Tensor): Tensor {
  const grad = isGradEnabled();
  if (grad && self.isLeaf && self.requiresGrad)
    throw new AutogradError(
      "a leaf Variable that requires grad is being used in an in-place operation. " +
        "Wrap parameter updates in noGrad(() => ...), or use the out-of-place op.",
    );
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
