/**
 * Options shared by the layers that create parameters: the dtype (default:
 * getDefaultDType()) and device ("cpu"; cuda is refused by the tensor layer
 * until the GPU backend exists) of the new tensors, as PyTorch's factory
 * kwargs `dtype=` and `device=`.
 */
import { ValueError } from "../../errors/index.js";
import type { Device } from "../../tensor/device.js";
import type { DType } from "../../tensor/dtype.js";

export interface FactoryOptions {
  dtype?: DType;
  device?: string | Device;
}

/** The creation options for a layer's tensors (never requiresGrad: Parameter sets that). */
export function factory(opts: FactoryOptions): FactoryOptions {
  const out: FactoryOptions = {};
  if (opts.dtype !== undefined) out.dtype = opts.dtype;
  if (opts.device !== undefined) out.device = opts.device;
  return out;
}

/** Throws unless `v` is a non-negative integer (a size argument named `what`). */
export function checkSize(v: number, what: string): void {
  if (!Number.isInteger(v) || v < 0) throw new ValueError(`${what} must be a non-negative integer, got ${v}`);
}
