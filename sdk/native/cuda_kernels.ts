/**
 * Typed wrapper of the addon's CUDA kernel namespace (native/src/cuda): the
 * entry points of the CUDA kernel backend (sdk/tensor/backend/cuda/kernels.ts)
 * for a real device ("device": the fatbin built by nvcc, on the CUDA driver) or
 * for the emulated one ("emulate": the same kernels compiled for the host, over
 * host memory; TPRPC_CUDA=emulate). The emulated namespace also carries that
 * device's memory functions, the ones CudaDeviceBackend takes.
 *
 * @example
 *   const k = cudaKernels("emulate");
 *   if (typeof k === "string") console.log(k); // why not
 */
import { loadNative, nativeLoadError, toNativeError } from "./binding.js";

/**
 * The namespace as this layer sees it. NB: its functions are typed where they are used, by
 * CudaKernelApi and CudaMemoryApi in sdk/tensor/backend/cuda (this layer may not import the tensor
 * layer); sdk/index.ts hands the object over as those.
 */
export interface NativeCudaKernels {
  readonly mode: "emulate" | "device";
  readonly [fn: string]: unknown;
}

function wrapAll<T extends object>(o: T): T {
  const out: Record<string, unknown> = {};
  for (const [k, fn] of Object.entries(o))
    out[k] =
      typeof fn === "function"
        ? (...a: unknown[]) => {
            try {
              return (fn as (...x: unknown[]) => unknown)(...a);
            } catch (e) {
              throw toNativeError(e);
            }
          }
        : fn;
  return out as T;
}

const cache = new Map<string, unknown>();

/** The kernel namespace for `mode`, or why it is not viable here (a sentence). */
export function cudaKernels(mode: "emulate" | "device"): NativeCudaKernels | string {
  const hit = cache.get(mode);
  if (hit !== undefined) return hit as NativeCudaKernels | string;
  const native = loadNative();
  let got: NativeCudaKernels | string;
  if (!native) got = `the native addon did not load (${nativeLoadError() ?? "unknown reason"})`;
  else {
    try {
      got = wrapAll(native.cudaKernels(mode) as NativeCudaKernels);
    } catch (e) {
      got = (toNativeError(e) as Error).message;
    }
  }
  cache.set(mode, got);
  return got;
}

/** What this addon build carries for CUDA kernels (null without the addon). */
export function cudaKernelInfo(): { hostKernels: number; fatbinBytes: number; fatbinReason?: string } | null {
  return loadNative()?.cudaKernelInfo() ?? null;
}
