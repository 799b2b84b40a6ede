// NB: the reference pulls Node's types into index.d.ts for every consumer, e.g. the notebook kernel's
// type checker, whose own fallback Node typings are empty when @types/node is hoisted.
/// <reference types="node" preserve="true" />
/**
 * tprpc's public API. What this file does not export is internal.
 *
 *   import { tensor, randn, manualSeed, noGrad, nn, optim } from "tprpc";
 */
import "./autograd/methods.js";
import * as self from "./index.js";
import { setSdkNamespace } from "./rpc/api.js";
import { loadNative } from "./native/binding.js";
import { NativeBackend } from "./tensor/backend/native/index.js";
import { registerBackend } from "./tensor/backend/registry.js";
import { deviceBackendFor, provideDeviceBackend } from "./tensor/backend/devices.js";
import { provideCudaStagingDriver } from "./channel/cuda_staging/index.js";
import { nativeStagingDriver } from "./channel/cuda_staging/native_driver.js";
import { CudaDeviceBackend, type CudaMemoryApi, checkingAfterSync } from "./tensor/backend/cuda/index.js";
import { type EmulatedDeviceMemory, emulatedMemoryApi } from "./tensor/backend/cuda/emulated_memory.js";
import { type CudaKernelApi, CudaKernelBackend } from "./tensor/backend/cuda/kernels.js";
import { noteDeviceKernelsUnavailable, registerDeviceKernels } from "./tensor/backend/router.js";
import { cudaDevices, gpuLibrary, nativeGpu } from "./native/gpu.js";
import { cudaKernels } from "./native/cuda_kernels.js";
import { arrayOver, itemSize, setBufferAddressProvider } from "./tensor/dtype.js";
import { setSharedMemoryProvider } from "./tensor/shared.js";
import { nativeChannels } from "./native/channels.js";

// The native CPU backend becomes the default when the addon loads (TPRPC_BACKEND=ts keeps the
// reference; TPRPC_NATIVE=0 skips loading). TPRPC_NATIVE_MIN_NUMEL tunes the size below which work
// stays in TypeScript (the test suite sets 0 so every kernel of the native backend is exercised).
//
// NB: ordinary storages stay in V8's allocator. The addon's pool (aligned, shared-memory capable)
// hands blocks back only when Node runs the buffer finalizers, which it defers to the event loop:
// a synchronous training loop then never recycles (measured: 200 × 16 MiB allocations left 3.3 GB
// live and a 4M-element add took 30 ms, against 2.2 ms and ~200 MB RSS with V8's allocator).
// TPRPC_NATIVE_POOL=1 opts in; the channels use the pool directly for shared and receive buffers.
const native = loadNative();
// Tensor.shareMemory_: memfd-backed storages (native/src/channels/shared.cc), Linux only.
const shm = process.platform === "linux" ? nativeChannels() : null;
if (shm) setSharedMemoryProvider({ alloc: (n) => shm.shareAlloc(n), isShared: (v) => shm.isShared(v) });
if (native) {
  // Large host storages start on a 64-byte line (./tensor/dtype.ts, alignedArrayOver).
  setBufferAddressProvider((b) => native.addressOf(b));
  const minNumel = Number(process.env.TPRPC_NATIVE_MIN_NUMEL ?? 1024);
  const pooled = process.env.TPRPC_NATIVE_POOL === "1";
  registerBackend(
    new NativeBackend(native, {
      minNumel,
      allocArray: pooled ? (dtype, numel) => arrayOver(dtype, native.alloc(numel * itemSize(dtype)), numel) : null,
    }),
    { preferred: true },
  );
}

// CUDA tensors: the CUDA device backend (memory and copies) and the CUDA kernel backend (ops on
// them, native/src/cuda) serve them where the driver is usable; they are looked for on first use of
// a cuda device, so importing tprpc never runs cuInit. TPRPC_CUDA=0 turns CUDA off;
// TPRPC_CUDA=emulate makes cuda:0 an emulated device: host memory, and the same kernels compiled
// for the host, dispatched by the same code (CI runs the op parity suite on it); emulate:N, N devices.
provideDeviceBackend("cuda", () => {
  const mode = process.env.TPRPC_CUDA;
  if (mode === "0") return "disabled by TPRPC_CUDA=0";
  if (mode?.startsWith("emulate")) {
    // NB: emulate:N (N from 1 to 8) gives the emulated device N indices over the same host memory, so
    // device maps such as {"cuda:0": "cuda:1"} run between processes without a GPU
    const n = /^emulate(?::([1-8]))?$/.exec(mode);
    if (!n) return `TPRPC_CUDA=${mode} is not a mode: use emulate, or emulate:N for N devices (N from 1 to 8)`;
    const k = cudaKernels("emulate");
    if (typeof k === "string") return `TPRPC_CUDA=emulate, but the emulated device is not viable: ${k}`;
    return cudaBackend(k, emulatedMemoryApi(k as unknown as EmulatedDeviceMemory), Number(n[1] ?? 1), false);
  }
  const driver = gpuLibrary("cuda");
  if (!driver.isViable()) return `no usable CUDA driver (${driver.reason()})`;
  const k = cudaKernels("device");
  if (typeof k === "string") {
    noteDeviceKernelsUnavailable("cuda", k);
    return new CudaDeviceBackend(nativeGpu()!, cudaDevices().length, undefined, true);
  }
  return cudaBackend(k, nativeGpu()!, cudaDevices().length, true);
});

/**
 * The CUDA device backend over `api` with `k`'s kernels registered for it; their deferred index
 * errors are checked after each synchronization (checkingAfterSync). `sizeToDevice`: a GPU's
 * reclaim budget follows its memory (CudaDeviceBackend).
 */
function cudaBackend(k: object, api: CudaMemoryApi, count: number, sizeToDevice: boolean): CudaDeviceBackend {
  const kernels = new CudaKernelBackend(k as unknown as CudaKernelApi);
  registerDeviceKernels("cuda", kernels);
  return new CudaDeviceBackend(
    checkingAfterSync(api, (d) => kernels.checkErrors(d)),
    count,
    undefined,
    sizeToDevice,
  );
}

// cuda_staging's device side: the CUDA device backend's memory calls (the driver's, or the emulated
// device's), found when the first pipe with a GPU pair asks.
provideCudaStagingDriver(() => {
  const b = deviceBackendFor("cuda");
  if (!(b instanceof CudaDeviceBackend)) return "no CUDA device backend with driver memory calls";
  return nativeStagingDriver(b.api);
});

/** Threads used by the native kernels (including the calling thread), as torch.get_num_threads. */
export function getNumThreads(): number {
  return native ? native.getNumThreads() : 1;
}

/** Sets the native kernels' thread count (BLAS included), as torch.set_num_threads; a no-op without the addon. */
export function setNumThreads(n: number): void {
  native?.setNumThreads(n);
}

export { Tensor, type NestedArray, type GradHook } from "./tensor/tensor.js";
export { Device, type DeviceLike } from "./tensor/device.js";
export { cuda } from "./tensor/cuda.js";
export { type DType, DTYPES, getDefaultDType, setDefaultDType, promoteTypes } from "./tensor/dtype.js";
export { Generator, manualSeed, defaultGenerator } from "./tensor/random.js";
export { broadcastShapes } from "./tensor/shape.js";
export {
  tensor,
  zeros,
  ones,
  full,
  zerosLike,
  onesLike,
  fullLike,
  arange,
  linspace,
  eye,
  rand,
  randn,
  randint,
  randperm,
  multinomial,
  type TensorOptions,
  type RandomOptions,
  type TensorData,
} from "./tensor/creation.js";
export * as backend from "./tensor/backend/public.js";

export { noGrad, enableGrad, isGradEnabled, setGradEnabled } from "./autograd/grad_mode.js";
export * as autograd from "./autograd/public.js";
export {
  add,
  sub,
  mul,
  div,
  pow,
  neg,
  exp,
  log,
  log1p,
  expm1,
  sqrt,
  rsqrt,
  abs,
  sign,
  square,
  reciprocal,
  tanh,
  sigmoid,
  relu,
  gelu,
  erf,
  sin,
  cos,
  floor,
  ceil,
  round,
  clamp,
  maximum,
  minimum,
  where,
  maskedFill,
  eq,
  ne,
  lt,
  le,
  gt,
  ge,
  logicalAnd,
  logicalOr,
  logicalNot,
  isnan,
} from "./autograd/ops/elementwise.js";
export {
  sum,
  mean,
  variance as var,
  std,
  max,
  min,
  amax,
  argmax,
  argmin,
  logsumexp,
  prod,
  type ValuesIndices,
} from "./autograd/ops/reduce.js";
export { matmul, mm, bmm } from "./autograd/ops/linalg.js";
export {
  view,
  reshape,
  flatten,
  permute,
  transpose,
  t,
  narrow,
  select,
  slice,
  expand,
  squeeze,
  unsqueeze,
  contiguous,
  clone,
  detach,
  cat,
  stack,
  split,
  chunk,
} from "./autograd/ops/views.js";
export { indexSelect, gather, scatterAdd, embedding, softmax, logSoftmax } from "./autograd/ops/indexing.js";

export * as optim from "./optim/index.js";

export * from "./errors/index.js";
export * as nn from "./nn/index.js";

export * as rpc from "./rpc/api.js";
export * as distAutograd from "./dist_autograd/index.js";
export * as distributed from "./distributed/index.js";
export { DistributedOptimizer } from "./dist_optim/index.js";
export { RemoteModule } from "./remote_module/index.js";
export * as cluster from "./cluster/index.js";
export * as display from "./display/index.js";

// Shipped code runs against this namespace on the callee (as `tprpc` and by its export names).
setSdkNamespace(self);
