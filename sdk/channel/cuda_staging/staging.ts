/**
 * cuda_staging's data path: device -> pinned host -> host lane -> pinned host
 * -> device, chunked and double-buffered as ./schedule.ts plans it.
 *
 * Sender, per chunk i (slot i % slots, taken back once chunk i - slots was
 * sent): issue the device-to-host copy into the slot on the stream, record a
 * fence; chunk i is handed to the lane after chunk i-1 was and once its fence
 * passed. Chunk i+1's copy is issued before chunk i crosses (overlap).
 * Receiver, per chunk i (slot taken back once chunk i - slots reached the
 * device): the lane fills the slot, then the host-to-device copy is issued
 * and fenced; chunk i+1 arrives while chunk i's copy runs. `recv` resolves
 * when every fence passed.
 *
 * The driver calls are an interface (StagingDriver) so this runs on the CPU
 * against a stand-in; the lane is whatever carries host bytes in order (the
 * pipe's CPU channel). NB: no GPU run has checked this path yet.
 */
import { stagingChunks, STAGING_CHUNK_BYTES, STAGING_SLOTS } from "./schedule.js";

export interface StagingDriver {
  /** Pinned host memory (cuMemHostAlloc, through the pinned host allocator's cache). */
  pinned(bytes: number): Uint8Array;
  /** The stream staging copies go on for `device`. */
  stream(device: number): bigint;
  /** cuMemcpyDtoHAsync from ptr + offset into `dst` (pinned). */
  dtoh(device: number, ptr: bigint, offset: number, dst: Uint8Array, stream: bigint): void;
  /** cuMemcpyHtoDAsync from `src` (pinned) to ptr + offset. */
  htod(device: number, ptr: bigint, offset: number, src: Uint8Array, stream: bigint): void;
  /** cuEventRecord on `stream` now; the returned query is cuEventQuery (true once passed). */
  fence(device: number, stream: bigint): () => boolean;
}

/** Carries host bytes to the peer, in order: each send matches the peer's next recv. */
export interface HostLane {
  send(bytes: Uint8Array): Promise<void>;
  /** Fills `into` exactly with the next chunk. */
  recv(into: Uint8Array): Promise<void>;
}

export interface StagingOptions {
  chunkBytes?: number;
  slots?: number;
  /** Poll period for fences (ms). */
  pollMs?: number;
  /** Called with "d2h i", "send i", "recv i", "h2d i" as steps are issued (tests). */
  trace?: (step: string) => void;
}

/** A pool of pinned blocks of one size, reused across transfers. */
export class PinnedPool {
  private readonly free: Uint8Array[] = [];
  allocated = 0;
  constructor(
    private readonly driver: StagingDriver,
    readonly blockBytes: number,
  ) {}
  take(): Uint8Array {
    const b = this.free.pop();
    if (b) return b;
    this.allocated++;
    return this.driver.pinned(this.blockBytes);
  }
  give(b: Uint8Array): void {
    this.free.push(b);
  }
}

/** Polls `ready` until it says true, or until `stopped()` names an error (then rejects with it). */
function until(ready: () => boolean, pollMs: number, stopped: () => Error | null): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const poll = (): void => {
      try {
        const e = stopped();
        if (e) reject(e);
        else if (ready()) resolve();
        else setTimeout(poll, pollMs);
      } catch (e) {
        reject(e as Error);
      }
    };
    poll();
  });
}

export class Stager {
  readonly pool: PinnedPool;
  private readonly chunkBytes: number;
  private readonly slots: number;
  private readonly pollMs: number;
  private readonly trace: (s: string) => void;
  private stoppedWith: Error | null = null;
  private readonly stopped = (): Error | null => this.stoppedWith;

  constructor(
    private readonly driver: StagingDriver,
    opts: StagingOptions = {},
  ) {
    this.chunkBytes = opts.chunkBytes ?? STAGING_CHUNK_BYTES;
    this.slots = opts.slots ?? STAGING_SLOTS;
    this.pollMs = opts.pollMs ?? 1;
    this.trace = opts.trace ?? (() => undefined);
    this.pool = new PinnedPool(driver, this.chunkBytes);
  }

  /** Stops waiting: pending and later transfers reject with `error` (the pipe closed). */
  close(error: Error): void {
    this.stoppedWith ??= error;
  }

  /** Sends [ptr, ptr + byteLength) on `device` through `lane`; resolves once every chunk was handed over. */
  async send(device: number, ptr: bigint, byteLength: number, lane: HostLane): Promise<void> {
    const d = this.driver;
    const stream = d.stream(device);
    const chunks = stagingChunks(byteLength, this.chunkBytes, this.slots);
    const slots = chunks.slice(0, this.slots).map(() => this.pool.take());
    const sent: Promise<void>[] = [];
    let last: Promise<void> = Promise.resolve();
    try {
      for (const c of chunks) {
        if (c.reuses >= 0) await sent[c.reuses];
        const view = slots[c.slot]!.subarray(0, c.length);
        d.dtoh(device, ptr, c.offset, view, stream);
        this.trace(`d2h ${c.index}`);
        const ready = d.fence(device, stream);
        last = sent[c.index] = last
          .then(() => until(ready, this.pollMs, this.stopped))
          .then(() => {
            this.trace(`send ${c.index}`);
            return lane.send(view);
          });
        // NB: a failure surfaces through the chain; keep it from being "unhandled" meanwhile.
        last.catch(() => undefined);
      }
      await last;
    } finally {
      await Promise.allSettled(sent);
      for (const s of slots) this.pool.give(s);
    }
  }

  /** Receives `byteLength` bytes from `lane` into [ptr, ptr + byteLength) on `device`. */
  async recv(device: number, ptr: bigint, byteLength: number, lane: HostLane): Promise<void> {
    const d = this.driver;
    const stream = d.stream(device);
    const chunks = stagingChunks(byteLength, this.chunkBytes, this.slots);
    const slots = chunks.slice(0, this.slots).map(() => this.pool.take());
    const copied: Promise<void>[] = [];
    try {
      for (const c of chunks) {
        if (c.reuses >= 0) await copied[c.reuses];
        const view = slots[c.slot]!.subarray(0, c.length);
        await lane.recv(view);
        this.trace(`recv ${c.index}`);
        d.htod(device, ptr, c.offset, view, stream);
        this.trace(`h2d ${c.index}`);
        const p = until(d.fence(device, stream), this.pollMs, this.stopped);
        p.catch(() => undefined);
        copied[c.index] = p;
      }
      await Promise.all(copied);
    } finally {
      await Promise.allSettled(copied);
      for (const s of slots) this.pool.give(s);
    }
  }
}
