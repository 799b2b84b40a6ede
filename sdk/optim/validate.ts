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

/** Throws `Invalid <what>: <value>` unless value is a number in [0, 1] (Adadelta's rho). */
export function checkUnitInterval(value: unknown, what: string): void {
  if (typeof value !== "number" || !(value >= 0 && value <= 1))
    throw new ValueError(`Invalid ${what}: ${show(value)} (expected a number in [0, 1])`);
}

/** Throws unless etas is a pair [etaminus, etaplus] with 0 < etaminus < 1 < etaplus (Rprop). */
export function checkEtas(etas: unknown): void {
  const ok =
    Array.isArray(etas) &&
    etas.length === 2 &&
    typeof etas[0] === "number" &&
    typeof etas[1] === "number" &&
    0 < etas[0] &&
    etas[0] < 1 &&
    1 < etas[1];
  if (!ok)
    throw new ValueError(
      `Invalid eta values: ${Array.isArray(etas) ? etas.map(show).join(", ") : show(etas)} ` +
        "(expected a pair [etaminus, etaplus] with 0 < etaminus < 1 < etaplus, e.g. [0.5, 1.2])",
    );
}

function showList(v: unknown): string {
  return Array.isArray(v) ? `[${v.map(show).join(", ")}]` : show(v);
}

/** Throws unless stepSizes is a pair [min, max] of numbers with 0 <= min <= max (Rprop). */
export function checkStepSizes(stepSizes: unknown): void {
  const ok =
    Array.isArray(stepSizes) &&
    stepSizes.length === 2 &&
    typeof stepSizes[0] === "number" &&
    typeof stepSizes[1] === "number" &&
    0 <= stepSizes[0] &&
    stepSizes[0] <= stepSizes[1];
  if (!ok)
    throw new ValueError(
      `Invalid stepSizes: ${showList(stepSizes)} (expected a pair [min, max] with 0 <= min <= max, e.g. [1e-6, 50])`,
    );
}
