/**
 * Small helpers shared by every layer: debug logging behind TPRPC_DEBUG and
 * argument checks that throw typed errors.
 */
import { TprpcError } from "../errors/index.js";

const debugLevel = Number(typeof process !== "undefined" ? (process.env.TPRPC_DEBUG ?? 0) : 0) || 0;

/** Writes to stderr when TPRPC_DEBUG >= level (1 = lifecycle ... 4 = every message). */
export function debug(level: number, scope: string, ...args: unknown[]): void {
  if (debugLevel >= level) console.error(`[tprpc:${scope}]`, ...args);
}

/** Whether TPRPC_DEBUG is at least `level`. */
export function debugEnabled(level: number): boolean {
  return debugLevel >= level;
}

/** Throws `new Err(message())` when `cond` is false; the message is built lazily. */
export function check(cond: unknown, Err: new (msg: string) => TprpcError, message: () => string): asserts cond {
  if (!cond) throw new Err(message());
}

export function product(xs: readonly number[]): number {
  let p = 1;
  for (const x of xs) p *= x;
  return p;
}

export function arraysEqual(a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
