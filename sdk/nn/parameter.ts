/**
 * Parameter: a Tensor that a Module registers as one of its learnable
 * parameters, as torch.nn.Parameter. It is a leaf (no gradFn) that requires
 * grad by default and shares its storage, shape and strides with the tensor
 * it wraps (which is thereby cut off from any graph, as `data.detach()`).
 *
 *   this.weight = new Parameter(zeros([4, 3]));
 */
import { zeros } from "../tensor/creation.js";
import { Tensor } from "../tensor/tensor.js";

export class Parameter extends Tensor {
  /** Wraps `data` (default: an empty float tensor); `requiresGrad` defaults to true. */
  constructor(data: Tensor = zeros([0]), requiresGrad = true) {
    super(data.storage, [...data.shape], [...data.strides], data.offset);
    this.requiresGrad_(requiresGrad);
  }

  override toString(): string {
    return `Parameter containing:\n${super.toString()}`;
  }

  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }
}
