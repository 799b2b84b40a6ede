/**
 * How the SDK's own modules hand their forward's intermediates to autograd's recycling
 * (sdk/autograd/intermediates.ts): `dropping(stock, body)` runs `body` in a scope; `body` pushes onto
 * its array the tensors it made and does not return, and they are recycled once backward is done
 * with them. Only when `stock`: the module and the submodules it passes them to are the SDK's own
 * classes with their own forward (isStock), which keep nothing they are given.
 */
import { closeScope, openScope } from "../autograd/intermediates.js";
import type { Tensor } from "../tensor/tensor.js";

/** Whether `m` is exactly an instance of `cls` (not a subclass) whose forward was not replaced on the instance. */
export function isStock(m: object, cls: abstract new (...args: never[]) => object): boolean {
  return Object.getPrototypeOf(m) === cls.prototype && !Object.prototype.hasOwnProperty.call(m, "forward");
}

/** Runs a forward whose dropped intermediates (pushed onto `drop`) autograd may recycle; see the file's top. */
export function dropping(stock: boolean, body: (drop: Tensor[]) => Tensor): Tensor {
  if (!stock) return body([]);
  const scope = openScope();
  const drop: Tensor[] = [];
  let out: Tensor | null = null;
  try {
    out = body(drop);
    return out;
  } finally {
    // NB: after an error nothing is dropped (who saw what is not known)
    closeScope(scope, out, out === null ? null : drop);
  }
}
