/**
 * The one file that loads tprpc's native addon (native/, a node-addon-api
 * module), and its typed wrapper. Everything else imports `loadNative()` from
 * here and never touches the `.node` file.
 *
 * Loading:
 *  1. `TPRPC_NATIVE=0` disables the addon silently: `loadNative()` returns null.
 *  2. node-gyp-build picks the addon in `<package>/native` (or `TPRPC_NATIVE_DIR`):
 *     a local build (`native/build/Release/tprpc.node`) first, else the prebuild
 *     for this platform (`native/prebuilds/linux-x64/tprpc.glibc.node`).
 *  3. When neither loads, ONE warning goes to stderr (the TS backend is used and how
 *     to build the addon) and `loadNative()` returns null; the reason stays in `nativeLoadError()`.
 *
 * Native failures are thrown by the addon as errors named "NativeError" with
 * `code` and `errno`; every wrapped function rethrows them as the sdk's `NativeError`.
 *
 * @example
 *   const native = loadNative();
 *   if (native) console.log(native.capabilities().simd, native.poolStats().liveBytes);
 */
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { NativeError } from "../errors/index.js";
import { debug } from "../util/index.js";

/** A strided view as the kernels parse it (native/src/view.h); offset and strides in elements. */
export interface NativeView {
  data: Float32Array | Float64Array | Int32Array | BigInt64Array | Uint8Array;
  offset: number;
  shape: readonly number[];
  strides: readonly number[];
}

export type NativeSimd = "avx512" | "avx2" | "sse4" | "none";
export type NativeLibName = "cuda" | "nvrtc" | "cublas" | "nccl" | "ucx";

/** What dlopen found for one run-time library (native/src/dynlib.h). */
export interface NativeLibStatus {
  viable: boolean;
  /** The file the soname resolved to. */
  path?: string;
  version?: string;
  /** Why the library is not viable; says what to install or set. */
  reason?: string;
  /** Required symbols the library lacks. */
  missing?: string[];
  /** CUDA driver only: devices reported by cuDeviceGetCount. */
  devices?: number;
}

export interface NativeCapabilities {
  /** Best SIMD level of this CPU (run-time cpuid). */
  simd: NativeSimd;
  /** Threads of the addon's kernel thread pool (including the JS thread). */
  threads: number;
  blas: { name: "openblas"; version: string; corename: string; threads: number; config: string };
  libs: Record<NativeLibName, NativeLibStatus>;
}

export interface NativeAllocOptions {
  /** Back the storage with shared memory (memfd), so `sharedMemory()` can hand it to a peer. */
  shared?: boolean;
  /** Fault the pages in now (receive buffers): no page faults while the bytes arrive. */
  prefault?: boolean;
  /** Zero the bytes, as `new ArrayBuffer` does (default true); false for outputs fully overwritten. */
  zero?: boolean;
}

export interface NativePoolStats {
  /** Bytes in free blocks kept for reuse (bounded by `limitBytes`). */
  cachedBytes: number;
  /** Bytes in blocks held by live ArrayBuffers (size-class capacity, not byteLength). */
  liveBytes: number;
  /** Blocks taken from the OS. */
  allocations: number;
  /** Blocks served from the cache. */
  reuses: number;
  limitBytes: number;
  cachedBlocks: number;
  liveBlocks: number;
}

/** The memfd behind a shared storage: send `fd` over a unix socket, or open `path` from this host. */
export interface NativeSharedMemory {
  fd: number;
  byteLength: number;
  path: string;
}

/** Every function of the addon. Kernels: contract in native/src/kernels/kernels.h; `out` is contiguous. */
export interface NativeBinding {
  /** The `.node` file that was loaded. */
  readonly path: string;

  unary(op: string, x: NativeView, out: NativeView, a0?: number, a1?: number): void;
  binary(op: string, a: NativeView, b: NativeView, out: NativeView): void;
  where(cond: NativeView, a: NativeView, b: NativeView, out: NativeView): void;
  reduce(op: string, x: NativeView, dims: readonly number[], out: NativeView): void;
  argReduce(op: string, x: NativeView, dim: number, out: NativeView): void;
  /** out = a @ b, or out += a @ b with accumulate (batch dims any strides). */
  matmul(a: NativeView, b: NativeView, out: NativeView, accumulate?: boolean): void;
  softmax(x: NativeView, dim: number, log: boolean, out: NativeView): void;
  /** Over the last dim; `mean` and `rstd` (one per row), when given, receive the statistics for backward. */
  layerNorm(
    x: NativeView,
    weight: NativeView | null,
    bias: NativeView | null,
    eps: number,
    out: NativeView,
    mean?: NativeView | null,
    rstd?: NativeView | null,
  ): void;
  /** layerNorm's backward over [rows, D]; null outputs are skipped (contract: native/src/kernels/fused.cc). */
  layerNormBackward(
    g: NativeView,
    x: NativeView,
    mean: NativeView,
    rstd: NativeView,
    weight: NativeView | null,
    gx: NativeView | null,
    gw: NativeView | null,
    gb: NativeView | null,
  ): void;
  /** One Adam/AdamW step in place (the scalars of sdk/tensor/backend/interface.ts's AdamStepArgs, in order). */
  adamStep(
    p: NativeView,
    grad: NativeView,
    expAvg: NativeView,
    expAvgSq: NativeView,
    maxExpAvgSq: NativeView | null,
    decay: number,
    l2: number,
    beta1: number,
    oneMinusBeta1: number,
    beta2: number,
    oneMinusBeta2: number,
    bc2Sqrt: number,
    eps: number,
    negStepSize: number,
    maximize: boolean,
  ): void;
  /** One SGD step in place on p (and buf): torch.optim.SGD's update, op for op (native/src/kernels/fused.cc). */
  sgdStep(
    p: NativeView,
    grad: NativeView,
    buf: NativeView | null,
    lr: number,
    momentum: number,
    dampening: number,
    weightDecay: number,
    nesterov: boolean,
    maximize: boolean,
    first: boolean,
  ): void;
  /** (log-)softmax backward along the last dim of contiguous views (native/src/kernels/fused.cc). */
  softmaxBackward(y: NativeView, g: NativeView, log: boolean, gx: NativeView): void;
  /** softmax(where(mask, -inf, x / divisor)) along the last dim; mask a contiguous bool [T, S] (softmax.cc). */
  maskedSoftmax(x: NativeView, mask: NativeView, divisor: number, out: NativeView): void;
  /** out = g * gelu'(x) (tanh: the tanh form's) over contiguous float32 views of one element count (fused.cc). */
  geluBackward(x: NativeView, g: NativeView, tanh: boolean, out: NativeView): void;
  indexSelect(x: NativeView, dim: number, index: NativeView, out: NativeView): void;
  gather(x: NativeView, dim: number, index: NativeView, out: NativeView): void;
  scatterAdd(dst: NativeView, dim: number, index: NativeView, src: NativeView): void;
  copy(src: NativeView, dst: NativeView): void;
  fill(dst: NativeView, value: number): void;

  getNumThreads(): number;
  setNumThreads(n: number): void;
  /** Threads OpenBLAS uses for matmul. */
  getBlasThreads(): number;
  setBlasThreads(n: number): void;
  /** The vector ISA the float32 elementwise kernels use ("avx512", "avx2", ...). */
  simdIsa(): string;
  /** Forces an ISA (tests compare them); false when this CPU lacks it. */
  setSimdIsa(name: string): boolean;
  capabilities(): NativeCapabilities;
  /** What capabilities() looks for: each library's candidate sonames (in order) and required symbols. */
  libraryTable(): Record<NativeLibName, { sonames: string[]; symbols: string[] }>;
  /** Test hook: throws a NativeError with this code, errno and message. */
  throwNativeError(code: string, errno: number, message: string): never;

  /** A 64-byte aligned, pooled storage; returned to the pool when the ArrayBuffer is collected. */
  alloc(byteLength: number, options?: NativeAllocOptions): ArrayBuffer;
  poolStats(): NativePoolStats;
  /** Frees every cached block; returns the bytes released. */
  trimPool(): number;
  /** Bounds the cache (default 1/16 of RAM within 256 MiB–2 GiB, or TPRPC_POOL_BYTES); returns the previous bound. */
  setPoolLimit(bytes: number): number;
  /** The memfd of a shared storage from `alloc(n, { shared: true })`, else null. */
  sharedMemory(buffer: ArrayBuffer | ArrayBufferView): NativeSharedMemory | null;
  /** Address of the first byte (debugging and alignment tests). */
  addressOf(buffer: ArrayBuffer | ArrayBufferView): number;
  /**
   * Detaches the buffer (of a view: its ArrayBuffer): its views read as empty from then on, and its memory is
   * released now instead of at a garbage collection (an external buffer's finalizer runs at Node's next
   * immediate). False when V8 would not detach it. Only for buffers nothing else will read.
   */
  detachBuffer(buffer: ArrayBuffer | ArrayBufferView): boolean;
  /** The native channels' namespace (shm, cma, ucx); typed in ./channels.ts, use `nativeChannels()` from there. */
  channels(): unknown;
  /** The GPU libraries' namespace (status, devices, NCCL ids); typed in ./gpu.ts, use `nativeGpu()` from there. */
  gpu(): unknown;
  /** The CUDA kernel backend's entry points ("emulate" or "device"); typed in ./cuda_kernels.ts. */
  cudaKernels(mode: string): unknown;
  /** What this build carries: host kernels, the fatbin's size (0 without nvcc) and why not. */
  cudaKernelInfo(): { hostKernels: number; fatbinBytes: number; fatbinReason?: string };
}

type RawBinding = Record<string, unknown>;

/** The names of every function the addon exports (a test checks the list against the .node). */
export const NATIVE_FUNCTIONS = [
  "unary",
  "binary",
  "where",
  "reduce",
  "argReduce",
  "matmul",
  "softmax",
  "layerNorm",
  "layerNormBackward",
  "adamStep",
  "sgdStep",
  "softmaxBackward",
  "maskedSoftmax",
  "geluBackward",
  "indexSelect",
  "gather",
  "scatterAdd",
  "copy",
  "fill",
  "getNumThreads",
  "setNumThreads",
  "getBlasThreads",
  "setBlasThreads",
  "simdIsa",
  "setSimdIsa",
  "capabilities",
  "libraryTable",
  "throwNativeError",
  "alloc",
  "poolStats",
  "trimPool",
  "setPoolLimit",
  "sharedMemory",
  "addressOf",
  "detachBuffer",
  "channels",
  "gpu",
  "cudaKernels",
  "cudaKernelInfo",
] as const satisfies readonly (keyof NativeBinding)[];

/** Errors the addon raises with name "NativeError" become the sdk's NativeError; others pass through. */
export function toNativeError(e: unknown): unknown {
  if (e instanceof Error && e.name === "NativeError" && !(e instanceof NativeError)) {
    const { code, errno } = e as Error & { code?: unknown; errno?: unknown };
    const err = new NativeError(e.message, String(code ?? "EUNKNOWN"), typeof errno === "number" ? errno : 0);
    if (e.stack) err.stack = `NativeError: ${e.message}\n${e.stack.split("\n").slice(1).join("\n")}`;
    return err;
  }
  return e;
}

function wrap(raw: RawBinding, file: string): NativeBinding {
  const out: Record<string, unknown> = { path: file };
  for (const name of NATIVE_FUNCTIONS) {
    const fn = raw[name];
    if (typeof fn !== "function") throw new Error(`${file} lacks ${name}(); rebuild it (npm run build:native)`);
    out[name] = (...args: unknown[]): unknown => {
      try {
        return (fn as (...a: unknown[]) => unknown)(...args);
      } catch (e) {
        throw toNativeError(e);
      }
    };
  }
  return out as unknown as NativeBinding;
}

/** The package root: the nearest folder above this file whose package.json is named "tprpc". */
function packageRoot(): string | null {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pj = path.join(dir, "package.json");
    try {
      if ((JSON.parse(fs.readFileSync(pj, "utf8")) as { name?: unknown }).name === "tprpc") return dir;
    } catch {
      // not here (or unreadable): keep walking up
    }
    const up = path.dirname(dir);
    if (up === dir) return null;
    dir = up;
  }
}

/** The folder holding binding.gyp, build/ and prebuilds/ (`TPRPC_NATIVE_DIR` overrides it). */
export function nativeDir(): string | null {
  const override = process.env.TPRPC_NATIVE_DIR;
  if (override) return path.resolve(override);
  const root = packageRoot();
  return root ? path.join(root, "native") : null;
}

let cached: NativeBinding | null | undefined;
let loadError: string | null = null;

function load(): NativeBinding {
  const dir = nativeDir();
  if (!dir) throw new Error("could not find tprpc's package folder above " + fileURLToPath(import.meta.url));
  const require = createRequire(import.meta.url);
  const nodeGypBuild = require("node-gyp-build") as { path(dir: string): string };
  const file = nodeGypBuild.path(dir);
  const binding = wrap(require(file) as RawBinding, file);
  debug(1, "native", `loaded ${file}`);
  return binding;
}

/**
 * TPRPC_NUM_THREADS (a whole number 1–64) sizes the kernels' thread pool (BLAS included) at load;
 * unset, the pool has min(8, cores) threads. Workers that tprpc starts get it set (rpc/launcher.ts).
 */
function applyThreadsEnv(binding: NativeBinding): void {
  const v = process.env.TPRPC_NUM_THREADS;
  if (v === undefined || v === "") return;
  const n = Number(v);
  if (Number.isInteger(n) && n >= 1 && n <= 64) binding.setNumThreads(n);
  else process.stderr.write(`tprpc: warning: TPRPC_NUM_THREADS=${v} is not a whole number 1-64; ignored\n`);
}

/**
 * The addon, loaded once; null when `TPRPC_NATIVE=0` or when it cannot be loaded
 * (then one warning is printed and `nativeLoadError()` says why).
 */
export function loadNative(): NativeBinding | null {
  if (cached !== undefined) return cached;
  if (process.env.TPRPC_NATIVE === "0") {
    loadError = "disabled by TPRPC_NATIVE=0";
    return (cached = null);
  }
  try {
    cached = load();
    applyThreadsEnv(cached);
  } catch (e) {
    loadError = (e instanceof Error ? e.message : String(e)).trim();
    cached = null;
    process.stderr.write(
      `tprpc: warning: the native addon did not load, so tensors use the (much slower) TypeScript backend.\n` +
        `  reason: ${loadError.split("\n")[0]}\n` +
        `  to build it (needs g++, make, python3 and libopenblas-pthread-dev): run \`npm rebuild tprpc\` in your project,\n` +
        `  or \`npm run build:native\` in a tprpc checkout. Set TPRPC_NATIVE=0 to use the TypeScript backend without this warning.\n`,
    );
  }
  return cached;
}

/** Why `loadNative()` returned null, or null when it loaded (or was not asked yet). */
export function nativeLoadError(): string | null {
  return loadError;
}
