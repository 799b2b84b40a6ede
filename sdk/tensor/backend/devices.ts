/**
 * Device backends by device type (today only "cuda"). A backend registers
 * itself only when it is viable; otherwise its loader notes why, and that
 * reason reaches the user in the DeviceError for `x.to("cuda")`.
 *
 * NB: a separate file from ./registry.ts (the kernel backends), so that
 * ../device.ts can import it without pulling in the TS backend (an import cycle).
 */
import type { DeviceType } from "../device.js";
import type { DeviceBackend } from "./interface.js";

const backends = new Map<DeviceType, DeviceBackend>();
const reasons = new Map<DeviceType, string | (() => string)>();

/** Makes `b` serve its device type (replacing any earlier one); call only when it is viable. */
export function registerDeviceBackend(b: DeviceBackend): void {
  backends.set(b.type, b);
  reasons.delete(b.type);
}

/** Removes the backend for `type` (tests; a backend that became unusable), keeping `reason` for errors. */
export function unregisterDeviceBackend(type: DeviceType, reason?: string): void {
  backends.delete(type);
  if (reason !== undefined) reasons.set(type, reason);
}

/**
 * Records why no backend serves `type` here (e.g. "libcuda.so.1 not found ..."); a function is
 * asked only when an error needs the reason (NB: probing the CUDA driver runs cuInit, so it waits).
 */
export function noteDeviceUnavailable(type: DeviceType, reason: string | (() => string)): void {
  if (!backends.has(type)) reasons.set(type, reason);
}

const providers = new Map<DeviceType, () => DeviceBackend | string>();

/**
 * Defers finding the backend for `type` to its first use: `provider` returns
 * the backend, or why there is none (NB: probing the CUDA driver runs cuInit,
 * so `import "tprpc"` does not; torch initializes CUDA lazily too).
 */
export function provideDeviceBackend(type: DeviceType, provider: () => DeviceBackend | string): void {
  providers.set(type, provider);
}

/** The viable backend for `type`, or undefined. */
export function deviceBackendFor(type: DeviceType): DeviceBackend | undefined {
  const provider = providers.get(type);
  if (provider) {
    providers.delete(type);
    let got: DeviceBackend | string;
    try {
      got = provider();
    } catch (e) {
      got = `finding a ${type} backend failed: ${(e as Error).message}`;
    }
    if (typeof got === "string") noteDeviceUnavailable(type, got);
    else if (!backends.has(type)) registerDeviceBackend(got);
  }
  return backends.get(type);
}

/** Why `type` has no backend here, when a loader said so. */
export function deviceUnavailableReason(type: DeviceType): string | undefined {
  const r = reasons.get(type);
  return typeof r === "function" ? r() : r;
}
