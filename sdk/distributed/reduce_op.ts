/**
 * Reduction operators of allReduce and reduceScatter (torch.distributed.ReduceOp),
 * applied in place with the tensor backend's binary kernels.
 */
import { ValueError } from "../errors/index.js";
import { getBackend } from "../tensor/backend/registry.js";
import { isFloating } from "../tensor/dtype.js";
import * as raw from "../tensor/raw.js";
import type { Tensor } from "../tensor/tensor.js";

/** torch.distributed.ReduceOp, as strings: `ReduceOp.SUM === "sum"`. */
export const ReduceOp = {
  SUM: "sum",
  AVG: "avg",
  PRODUCT: "product",
  MAX: "max",
  MIN: "min",
} as const;

export type ReduceOp = (typeof ReduceOp)[keyof typeof ReduceOp];

const KERNEL = { sum: "add", avg: "add", product: "mul", max: "maximum", min: "minimum" } as const;

/** Throws ValueError for an unknown op, or AVG of a tensor that is not floating point. */
export function checkReduceOp(op: unknown, t: Tensor, what: string): ReduceOp {
  if (typeof op !== "string" || !(op in KERNEL))
    throw new ValueError(`${what}: op is one of ${Object.values(ReduceOp).join(", ")} (ReduceOp), got ${String(op)}`);
  if (op === "avg" && !isFloating(t.dtype))
    throw new ValueError(`${what}: ReduceOp.AVG needs a floating-point tensor, got ${t.dtype}; use SUM and divide`);
  if (t.dtype === "bool" && op !== "max" && op !== "min")
    throw new ValueError(`${what}: a bool tensor reduces with MAX or MIN, got ${op}`);
  return op as ReduceOp;
}

/** acc = acc (op) x, in place; same shape and dtype. */
export function reduceInto(op: ReduceOp, acc: Tensor, x: Tensor): void {
  getBackend().binary(KERNEL[op], acc, x, acc);
  acc.storage.version++;
}

/**
 * into = x for a received message (same shape and dtype): one typed-array copy (a memmove) when
 * both are contiguous CPU tensors, else the backend's strided copy. The backend's copy goes
 * element by element below its native threshold (4096 elements), which cost a 4 KB p2p message
 * more than its pipe work did.
 */
export function copyMessage(into: Tensor, x: Tensor): void {
  if (
    into.dtype === x.dtype &&
    into.device.type === "cpu" &&
    x.device.type === "cpu" &&
    into.isContiguous() &&
    x.isContiguous()
  ) {
    const n = into.numel();
    const src = x.storage.data;
    (into.storage.data as typeof src).set(src.subarray(x.offset, x.offset + n) as never, into.offset);
    into.storage.version++;
  } else raw.copyInto(into, x);
}

/** The last step of AVG: t /= n, in place. */
export function finishAvg(op: ReduceOp, t: Tensor, n: number): void {
  if (op !== "avg") return;
  getBackend().binary("div", t, raw.expandTo(raw.scalarTensor(n, t.dtype), t.shape), t);
  t.storage.version++;
}
