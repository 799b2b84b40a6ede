/**
 * Backends by name. The TS backend is always registered; the native backend
 * registers itself when its addon loads. `TPRPC_BACKEND=ts|native` picks the
 * default at start-up; `setBackend(name)` switches at run time (tests run the
 * same suite once per backend this way). These are the CPU backends:
 * getBackend() returns a router (./router.ts) that sends the kernels of
 * tensors on other devices to that device's kernel backend.
 */
import { ValueError } from "../../errors/index.js";
import type { Backend } from "./interface.js";
import { TsBackend } from "./ts/index.js";
import { DeviceRouter } from "./router.js";

const backends = new Map<string, Backend>();
let current: Backend;

/**
 * Adds a backend. It becomes the current one when TPRPC_BACKEND names it, or
 * when `preferred` is set and TPRPC_BACKEND names no other registered backend
 * (the native backend registers itself as preferred).
 */
export function registerBackend(b: Backend, opts: { preferred?: boolean } = {}): void {
  backends.set(b.name, b);
  const wanted = typeof process !== "undefined" ? process.env.TPRPC_BACKEND : undefined;
  if (wanted === b.name || (opts.preferred && (wanted === undefined || wanted === "" || !backends.has(wanted))))
    current = b;
}

const router = new DeviceRouter(() => current);

/** The backend that runs a kernel: the current CPU backend, or the kernels of the tensors' device. */
export function getBackend(): Backend {
  return router;
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
