/**
 * Hyperparameter checks shared by the optimizers, with torch's messages
 * ("Invalid learning rate: -1"). A check gets the value as given (it may not
 * be a number at all when it came from untyped code or over RPC).
 */
import { ValueError } from "../errors/index.js";

function show(v: unknown): string {
  return typeof v === "string" ? JSON.stringify(v) : String(v);
}

/** Throws `Invalid <what>: <value>` unless value is a number >= 0 (NaN fails). */
export function checkNonNegative(value: unknown, what: string): void {
  if (typeof value !== "number" || !(value >= 0)) throw new ValueError(`Invalid ${what}: ${show(value)}`);
}

/** Throws unless betas is a pair of numbers, each in [0, 1). */
export function checkBetas(betas: unknown): void {
  if (!Array.isArray(betas) || betas.length !== 2)
    throw new ValueError(`Invalid betas: ${show(betas)} (expected a pair [beta1, beta2], e.g. [0.9, 0.999])`);
  betas.forEach((b: unknown, i) => {
    if (typeof b !== "number" || !(b >= 0 && b < 1))
      throw new ValueError(`Invalid beta parameter at index ${i}: ${show(b)}`);
  });
}

/** Throws unless value is a boolean. */
export function checkFlag(value: unknown, name: string): void {
  if (typeof value !== "boolean")
    throw new ValueError(`Invalid ${name} value: ${show(value)} (expected true or false)`);
}
