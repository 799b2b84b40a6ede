/**
 * Loading a state dict into a module's live tensors, as torch's
 * load_state_dict: match keys, check shapes, copy values in place without
 * recording gradients, and report problems in PyTorch's wording:
 *
 *   Error(s) in loading state_dict for Linear:
 *   	Missing key(s) in state_dict: "bias".
 *   	Unexpected key(s) in state_dict: "foo".
 */
import { ShapeError, ValueError } from "../errors/index.js";
import { noGrad } from "../autograd/grad_mode.js";
import { Tensor } from "../tensor/tensor.js";

export interface LoadStateDictResult {
  missingKeys: string[];
  unexpectedKeys: string[];
}

const shapeStr = (s: readonly number[]): string => `[${s.join(", ")}]`;
const quoted = (keys: readonly string[]): string => keys.map((k) => `"${k}"`).join(", ");

/**
 * Copies `state` into `targets` ([key, live tensor] pairs of one module).
 * Size mismatches always throw (ShapeError); missing and unexpected keys throw
 * only when `strict` (ValueError). Nothing is copied when anything throws.
 */
export function loadStateEntries(
  moduleName: string,
  targets: readonly [string, Tensor][],
  state: Readonly<Record<string, Tensor>>,
  strict: boolean,
): LoadStateDictResult {
  if (typeof state !== "object" || state === null)
    throw new ValueError(
      `Expected state_dict to be a Record<string, Tensor>, got ${state === null ? "null" : typeof state}`,
    );
  const expected = new Set(targets.map(([k]) => k));
  const missingKeys = targets.map(([k]) => k).filter((k) => !Object.hasOwn(state, k));
  const unexpectedKeys = Object.keys(state).filter((k) => !expected.has(k));
  const mismatches: string[] = [];
  for (const [k, t] of targets) {
    if (!Object.hasOwn(state, k)) continue;
    const v = state[k];
    if (!(v instanceof Tensor))
      mismatches.push(
        `While copying the parameter named "${k}", expected a Tensor from checkpoint but received ${typeof v}.`,
      );
    else if (v.shape.length !== t.shape.length || v.shape.some((d, i) => d !== t.shape[i]))
      mismatches.push(
        `size mismatch for ${k}: copying a param with shape ${shapeStr(v.shape)} from checkpoint, ` +
          `the shape in current model is ${shapeStr(t.shape)}.`,
      );
  }
  const keyErrors: string[] = [];
  if (strict) {
    if (missingKeys.length) keyErrors.push(`Missing key(s) in state_dict: ${quoted(missingKeys)}.`);
    if (unexpectedKeys.length) keyErrors.push(`Unexpected key(s) in state_dict: ${quoted(unexpectedKeys)}.`);
  }
  const errors = [...keyErrors, ...mismatches];
  if (errors.length) {
    const msg = `Error(s) in loading state_dict for ${moduleName}:\n\t${errors.join("\n\t")}`;
    throw keyErrors.length ? new ValueError(msg) : new ShapeError(msg);
  }
  noGrad(() => {
    for (const [k, t] of targets) {
      const v = state[k];
      if (v instanceof Tensor) t.copy_(v);
    }
  });
  return { missingKeys, unexpectedKeys };
}
