/**
 * Backends by name. The TS backend is always registered; the native backend
 * registers itself when its addon loads. `TPRPC_BACKEND=ts|native` picks the
 * default at start-up; `setBackend(name)` switches at run time (tests run the
 * same suite once per backend this way).
 */
import { ValueError } from "../../errors/index.js";
import type { Backend } from "./interface.js";
import { TsBackend } from "./ts/index.js";

const backends = new Map<string, Backend>();
let current: Backend;

export function registerBackend(b: Backend): void {
  backends.set(b.name, b);
  const wanted = typeof process !== "undefined" ? process.env.TPRPC_BACKEND : undefined;
  if (wanted === b.name) current = b;
}

export function getBackend(): Backend {
  return current;
}

export function setBackend(name: string): void {
  const b = backends.get(name);
  if (!b) throw new ValueError(`unknown backend "${name}"; available: ${[...backends.keys()].join(", ")}`);
  current = b;
}

export function listBackends(): string[] {
  return [...backends.keys()];
}

current = new TsBackend();
registerBackend(current);
