/**
 * The CUDA DeviceBackend: device memory and copies through the CUDA driver
 * API (the addon's gpu() namespace, handed in by sdk/index.ts; the tensor
 * layer never loads native code). Ops on CUDA tensors are the kernel
 * backend's (./kernels.ts); the emulated device (TPRPC_CUDA=emulate) gives
 * this class its memory through ./emulated_memory.ts instead of the driver.
 *
 * Memory: every storage's bytes come from the addon's caching allocator
 * (native/src/gpu/caching_allocator.h: per device and stream, as torch's),
 * allocated on the device's current stream and handed back to it once V8
 * collected the storage's DeviceMemory; the allocator keeps the block for
 * reuse instead of calling cuMemFree.
 *
 * How blocks come back, in synchronous loops too: PyTorch frees a tensor's
 * block when its refcount drops; here only V8 knows, and a
 * FinalizationRegistry tells only between tasks, so a loop with no await
 * (forward, backward, step, item()) freed nothing (24 steps of a small GPT
 * grew to 13.6 GB on an H200). So each block is tracked natively with a weak
 * reference to its DeviceMemory (native/src/gpu/block_tracker.h); V8 clears
 * it in the collection that finds the owner dead, and sweep() frees the
 * blocks of cleared owners, synchronously, at ~15-50 ns per live block. When
 * the tracked bytes pass the live estimate plus a budget, alloc() reclaims:
 * a sweep alone (what V8's own collections found); else a minor GC (0.4-1 ms)
 * and a sweep; else a full GC (6 ms with the SDK's 9 MB heap on the H200's
 * host, 79 ms at 90 MB, 345 ms at 400 MB) and a sweep, which sets the live
 * estimate. The budget is max(a floor, the live estimate, what the full GCs'
 * time share asks: doubled while they take over 5 % of the time between
 * them), at most 4 GiB; the floor is 1/16 of a GPU's memory within 256 MiB and
 * 4 GiB (256 MiB on the emulated device), and TPRPC_CUDA_RECLAIM_MB sets it (0:
 * no reclaims on allocation). An allocation that fails with EOOM runs a full GC, a sweep and
 * emptyCache, and tries once more. Measured on an H200, the GPT of
 * bench/gpt_step.ts ("bench" size): one reclaim per step, settled by the minor
 * GC (1.0-1.3 ms) and sweeps (~1 ms, mostly the 1,187 frees), 243 MB allocated
 * and flat, peak 256 MB, 133 cuMemAllocs in 24 steps (1,776 and 5.6 GB
 * without; bench/cuda_reclaim.ts). V8 scavenges clear the weak references of
 * young owners only because nothing else holds them weakly: an object
 * registered with a FinalizationRegistry survives every minor GC (V8 treats
 * the registry's cells as strong there) and is promoted, so nothing here
 * registers storages with one.
 *
 * NB: a block may be freed during any allocation, so code that keeps a device
 * pointer (DeviceMemory.handle) across an allocation must keep its
 * DeviceMemory (or tensor) referenced until the pointer's last use: V8 may
 * drop a local it sees no later use of.
 *
 * Copies are ordered on the device's current stream (0n, the legacy default
 * stream, unless `tprpc.cuda.setStream` chose another): host to device goes
 * directly from pinned memory, through two pinned staging buffers otherwise;
 * device to host waits for its bytes unless the destination is pinned and the
 * copy non-blocking. NB: exercised on a stand-in driver in CI; `npm run
 * gpu:check` runs it on a GPU.
 */
import { type GcFunction, v8Gc } from "../../../util/gc.js";
import { type Device } from "../../device.js";
import type { DeviceBackend, DeviceMemory } from "../interface.js";

/** One segment of the caching allocator, as torch.cuda.memory_snapshot() lists them. */
export interface CudaSegment {
  address: bigint;
  size: number;
  stream: bigint;
  pool: "small" | "large";
  blocks: { size: number; requested: number; state: "active_allocated" | "inactive" | "active_pending_free" }[];
}

/** The driver calls this backend needs (sdk/native/gpu.ts `NativeGpu` has them). */
export interface CudaMemoryApi {
  memInfo(device: number): { free: number; total: number };
  copyDtoD(
    srcDevice: number,
    src: bigint,
    srcOffset: number,
    dstDevice: number,
    dst: bigint,
    dstOffset: number,
    bytes: number,
  ): void;
  cachingAlloc(device: number, bytes: number, stream: bigint): bigint;
  cachingFree(device: number, ptr: bigint): void;
  /**
   * Tracks `ptr`'s block as owned by `owner` (its DeviceMemory), held weakly: sweepBlocks frees it
   * once V8 collected the owner (native/src/gpu/block_tracker.h), and nothing else may free it.
   */
  trackBlock(owner: object, device: number, ptr: bigint, bytes: number): void;
  /** Frees the tracked blocks whose owners were collected; what it freed (failed: frees that threw). */
  sweepBlocks(): { bytes: number; blocks: number; failed: number };
  /** Tracked blocks still owned (bytes, blocks), sweeps so far and the blocks they freed. */
  trackedBlocks(): { bytes: number; blocks: number; sweeps: number; freedBlocks: number };
  recordStream(device: number, ptr: bigint, stream: bigint): void;
  emptyCache(device: number): void;
  /** torch.cuda.memory_stats()'s flat keys ("allocated_bytes.all.current", ...). */
  memoryStats(device: number): Record<string, number>;
  resetPeakMemoryStats(device: number): void;
  resetAccumulatedMemoryStats(device: number): void;
  memorySnapshot(device: number): CudaSegment[];
  streamCreate(device: number): bigint;
  streamDestroy(device: number, stream: bigint): void;
  streamSynchronize(device: number, stream: bigint): void;
  streamQuery(device: number, stream: bigint): boolean;
  streamWaitStream(device: number, waiter: bigint, waitee: bigint): void;
  deviceSynchronize(device: number): void;
  /** Pinned host memory, back to the pinned cache once the ArrayBuffer is collected. */
  hostAlloc(bytes: number): ArrayBuffer;
  isPinned(view: Uint8Array): boolean;
  hostMemoryStats(): {
    allocated: number;
    peakAllocated: number;
    reserved: number;
    hostAllocs: number;
    hostFrees: number;
  };
  copyHtoDAsync(
    device: number,
    dst: bigint,
    dstOffset: number,
    src: Uint8Array,
    stream: bigint,
    blocking: boolean,
  ): void;
  copyDtoHAsync(
    device: number,
    src: bigint,
    srcOffset: number,
    dst: Uint8Array,
    stream: bigint,
    blocking: boolean,
  ): void;
  /** Sets `bytes` bytes at ptr + offset to `value`, ordered on the stream. */
  memsetAsync(device: number, ptr: bigint, offset: number, value: number, bytes: number, stream: bigint): void;
  copyDtoDAsync(
    device: number,
    src: bigint,
    srcOffset: number,
    dst: bigint,
    dstOffset: number,
    bytes: number,
    stream: bigint,
    blocking: boolean,
  ): void;
}

/**
 * `api` with `check(device)` run after each call that waits for the device's work: a blocking copy
 * to the host, a stream or device synchronize. The kernel backend's deferred index errors surface
 * there (CudaKernelBackend.checkErrors), as a CUDA error surfaces at the next synchronization.
 */
export function checkingAfterSync(api: CudaMemoryApi, check: (device: number) => void): CudaMemoryApi {
  return {
    ...api,
    copyDtoHAsync(device, src, srcOffset, dst, stream, blocking) {
      api.copyDtoHAsync(device, src, srcOffset, dst, stream, blocking);
      if (blocking) check(device);
    },
    streamSynchronize(device, stream) {
      api.streamSynchronize(device, stream);
      check(device);
    },
    deviceSynchronize(device) {
      api.deviceSynchronize(device);
      check(device);
    },
  };
}

/** What the collection policy did so far (CudaDeviceBackend.reclaimStats). */
export interface ReclaimStats {
  /** Times tracked bytes passed the threshold (each ran a sweep, maybe GCs). */
  reclaims: number;
  /** Of those, settled by the sweep alone (V8's own collections had found enough). */
  bySweep: number;
  /** Minor GCs (scavenges) and full GCs run, and their total time in ms. */
  minorGcs: number;
  majorGcs: number;
  gcMs: number;
  /** Sweeps run (by reclaims, the EOOM retry, and before stats and emptyCache), their total ms and bytes freed. */
  sweeps: number;
  sweepMs: number;
  freedBytes: number;
  /** Allocations that failed with EOOM and were retried after a full GC, sweep and emptyCache. */
  oomRetries: number;
}

/** The collection policy's bounds, in bytes (TPRPC_CUDA_RECLAIM_MB sets minBudget; 0 turns it off). */
export interface ReclaimPolicy {
  minBudget: number;
  maxBudget: number;
}

const MiB = 1 << 20;
const DEFAULT_POLICY: ReclaimPolicy = { minBudget: 256 * MiB, maxBudget: 4096 * MiB };
/**
 * The share of wall time the full GCs of reclaims may take: above it the budget doubles (fewer,
 * larger reclaims), under a quarter of it the budget halves back towards max(minBudget, live).
 */
const GC_TIME_SHARE = 0.05;

/** TPRPC_CUDA_RECLAIM_MB's policy; null when it is unset (or not a number of MB). */
function policyFromEnv(): ReclaimPolicy | null {
  const v = process.env.TPRPC_CUDA_RECLAIM_MB;
  if (v === undefined || v === "") return null;
  const mb = Number(v);
  if (!Number.isFinite(mb) || mb < 0) return null;
  return { minBudget: mb * MiB, maxBudget: Math.max(mb * MiB, DEFAULT_POLICY.maxBudget) };
}

export class CudaDeviceBackend implements DeviceBackend {
  readonly type = "cuda" as const;
  readonly name = "cuda-driver";
  /** The current stream per device index (absent: 0n, the legacy default stream). */
  private readonly streams = new Map<number, bigint>();
  private policy: ReclaimPolicy;
  /** False until the first allocation has sized minBudget to the device (sizeToDevice). */
  private sized: boolean;
  /** Bytes of tracked blocks not yet swept (owned, or collected and not swept yet). */
  private tracked = 0;
  /** Tracked bytes after the last full GC and sweep: the live estimate the budget grows from. */
  private base = 0;
  private budget: number;
  /** The budget the GC time share asks for (at least minBudget). */
  private timeBudget: number;
  /** When the last full GC a reclaim ran ended (performance.now()). */
  private lastFullGcEnd = -1;
  private readonly stats: ReclaimStats = {
    reclaims: 0,
    bySweep: 0,
    minorGcs: 0,
    majorGcs: 0,
    gcMs: 0,
    sweepMs: 0,
    sweeps: 0,
    freedBytes: 0,
    oomRetries: 0,
  };

  /**
   * `policy`: the reclaim bounds (default: TPRPC_CUDA_RECLAIM_MB's, else DEFAULT_POLICY's).
   * `sizeToDevice` (a GPU; not the emulated device, whose memory is the host's): with neither given,
   * minBudget becomes 1/16 of the first device's memory, within [256 MiB, 4 GiB], at the first
   * allocation. A minor GC costs about the same whatever the garbage, so on a large GPU fewer, larger
   * reclaims cost less: on an H200 (141 GB) the budget is 4 GiB, one reclaim per 16 outputs of 256 MB
   * where 256 MiB gave one per two (each ~1 ms against a 0.3 ms kernel).
   */
  constructor(
    readonly api: CudaMemoryApi,
    private readonly count: number,
    policy?: ReclaimPolicy,
    sizeToDevice = false,
  ) {
    const given = policy ?? policyFromEnv();
    this.policy = given ?? DEFAULT_POLICY;
    this.sized = given !== null || !sizeToDevice;
    this.budget = this.timeBudget = this.policy.minBudget;
  }

  /** minBudget from the device's memory (see the constructor). */
  private sizeBudget(device: number): void {
    this.sized = true;
    const total = this.api.memInfo(device).total;
    const min = Math.min(DEFAULT_POLICY.maxBudget, Math.max(DEFAULT_POLICY.minBudget, Math.floor(total / 16)));
    this.policy = { ...DEFAULT_POLICY, minBudget: min };
    this.timeBudget = Math.max(this.timeBudget, min);
    this.setBudget();
  }

  deviceCount(): number {
    return this.count;
  }

  /** The stream work for `device` is queued on now. */
  currentStream(device: number): bigint {
    return this.streams.get(device) ?? 0n;
  }

  setCurrentStream(device: number, stream: bigint): void {
    if (stream === 0n) this.streams.delete(device);
    else this.streams.set(device, stream);
  }

  alloc(device: Device, byteLength: number, zero: boolean): DeviceMemory {
    if (byteLength <= 0) return { device, byteLength, handle: 0n };
    const d = device.index;
    if (!this.sized) this.sizeBudget(d);
    if (this.policy.minBudget > 0 && this.tracked + byteLength > this.base + this.budget) this.reclaim(false);
    const stream = this.currentStream(d);
    const ptr = this.allocBlock(d, byteLength, stream);
    const mem: DeviceMemory = { device, byteLength, handle: ptr };
    try {
      this.api.trackBlock(mem, d, ptr, byteLength);
    } catch (e) {
      this.api.cachingFree(d, ptr);
      throw e;
    }
    this.tracked += byteLength;
    if (zero) this.api.memsetAsync(d, ptr, 0, 0, byteLength, stream);
    return mem;
  }

  /** cachingAlloc; on out-of-memory, a full GC, a sweep and emptyCache, then one more try. */
  private allocBlock(d: number, byteLength: number, stream: bigint): bigint {
    try {
      return this.api.cachingAlloc(d, byteLength, stream);
    } catch (e) {
      if ((e as { code?: unknown }).code !== "EOOM") throw e;
      this.stats.oomRetries++;
      this.reclaim(true);
      this.api.emptyCache(d);
      return this.api.cachingAlloc(d, byteLength, stream);
    }
  }

  /**
   * Frees the blocks of storages V8 already collected (no GC); the bytes freed. Cheap: one weak
   * reference looked at per live block.
   */
  sweep(): number {
    const t = performance.now();
    const r = this.api.sweepBlocks();
    this.stats.sweepMs += performance.now() - t;
    this.stats.sweeps++;
    this.stats.freedBytes += r.bytes;
    this.tracked -= r.bytes;
    return r.bytes;
  }

  /**
   * Gets device memory back from garbage, synchronously. Escalates: a sweep (what V8's own collections
   * found); if that left more than half a budget over the live estimate, a minor GC and a sweep; if
   * still so, a full GC and a sweep, which sets the live estimate. `full`: straight to the full GC (out
   * of memory). Without V8's gc() (see sdk/util/gc.ts) only the sweep runs. The next reclaim comes
   * when the tracked bytes pass the live estimate plus a budget: max(minBudget, live estimate, what
   * the GC time share asks), at most maxBudget.
   */
  reclaim(full: boolean): void {
    this.stats.reclaims++;
    const enough = () => {
      // NB: tracked bytes under the estimate mean the live bytes shrank (a model dropped): lower it
      if (this.tracked < this.base) this.setBase();
      return this.tracked <= this.base + this.budget / 2;
    };
    const gc = v8Gc();
    if (!full) {
      this.sweep();
      if (enough()) {
        this.stats.bySweep++;
        return;
      }
      if (gc) {
        this.gc(gc, "minor");
        this.sweep();
      }
    }
    if (full || !enough()) {
      if (gc) {
        const t = performance.now();
        this.gc(gc, "major");
        this.adapt(t);
      }
      this.sweep();
      this.setBase();
    }
  }

  /**
   * After a full GC that started at `start`: doubles the time budget when full GCs took more than
   * GC_TIME_SHARE of the time since the last one ended, halves it when under a quarter of that.
   * NB: only full GCs count: a minor one costs well under a millisecond (it scales with the young
   * survivors, not the heap), a full one grows with the JS heap (bench/cuda_reclaim.ts).
   */
  private adapt(start: number): void {
    const end = performance.now();
    const since = this.lastFullGcEnd < 0 ? Infinity : end - this.lastFullGcEnd;
    this.lastFullGcEnd = end;
    const share = (end - start) / since;
    if (share > GC_TIME_SHARE) this.timeBudget = Math.min(this.policy.maxBudget, this.timeBudget * 2);
    else if (share < GC_TIME_SHARE / 4) this.timeBudget = Math.max(this.policy.minBudget, this.timeBudget / 2);
    this.setBudget();
  }

  private gc(gc: GcFunction, type: "minor" | "major"): void {
    const t = performance.now();
    // NB: gc() with no argument is the full, synchronous collection; V8's gc extension reads only "minor"
    // and "async" from an options object, and takes any other object as the legacy truthy argument: minor
    if (type === "minor") gc({ type: "minor" });
    else gc();
    this.stats.gcMs += performance.now() - t;
    if (type === "minor") this.stats.minorGcs++;
    else this.stats.majorGcs++;
  }

  /** The live estimate is what is tracked now. */
  private setBase(): void {
    this.base = this.tracked;
    this.setBudget();
  }

  private setBudget(): void {
    this.budget = Math.min(this.policy.maxBudget, Math.max(this.policy.minBudget, this.base, this.timeBudget));
  }

  /** What the collection policy did so far, and the bytes it tracks (live or not yet swept). */
  reclaimStats(): ReclaimStats & { trackedBytes: number; liveEstimate: number; budget: number } {
    return { ...this.stats, trackedBytes: this.tracked, liveEstimate: this.base, budget: this.budget };
  }

  memoryInfo(device: Device): { free: number; total: number } {
    return this.api.memInfo(device.index);
  }

  copyFromHost(src: Uint8Array, dst: DeviceMemory, dstOffset: number, nonBlocking = false): void {
    const d = dst.device.index;
    this.api.copyHtoDAsync(d, dst.handle as bigint, dstOffset, src, this.currentStream(d), !nonBlocking);
  }

  copyToHost(src: DeviceMemory, srcOffset: number, dst: Uint8Array, nonBlocking = false): void {
    const d = src.device.index;
    this.api.copyDtoHAsync(d, src.handle as bigint, srcOffset, dst, this.currentStream(d), !nonBlocking);
  }

  copyDevice(src: DeviceMemory, srcOffset: number, dst: DeviceMemory, dstOffset: number, byteLength: number): void {
    const [s, d] = [src.device.index, dst.device.index];
    if (s === d) {
      // NB: stream-ordered, so whatever reads dst next on this stream sees the bytes
      this.api.copyDtoDAsync(
        d,
        src.handle as bigint,
        srcOffset,
        dst.handle as bigint,
        dstOffset,
        byteLength,
        this.currentStream(d),
        false,
      );
      return;
    }
    this.api.copyDtoD(s, src.handle as bigint, srcOffset, d, dst.handle as bigint, dstOffset, byteLength);
  }

  pinnedHost(byteLength: number): ArrayBuffer {
    return this.api.hostAlloc(byteLength);
  }

  isPinned(bytes: Uint8Array): boolean {
    return this.api.isPinned(bytes);
  }

  /** Marks `mem` as used on `stream` too: its block is reused only after that stream's work so far. */
  recordStream(mem: DeviceMemory, stream: bigint): void {
    if (mem.byteLength > 0) this.api.recordStream(mem.device.index, mem.handle as bigint, stream);
  }
}
