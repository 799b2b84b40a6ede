/**
 * What the native channels (./shm, ./cma, ./ucx) share on the TS side:
 * a set of pending operations that `close(error)` fails at once with the
 * caller's error, and the mapping of native failures to the channel layer's
 * typed errors (a dead peer is a WorkerUnavailableError naming it), the peer's setup
 * messages (Inbox), the same-host domain string, and the descriptor kinds with
 * their helpers (inline transfers, small descriptor bytes).
 */
import { randomUUID } from "node:crypto";
import { ChannelNotViableError, NativeError, WorkerUnavailableError } from "../errors/index.js";
import type { ChannelBootstrap, HostIdentity, SetupValue } from "./interface.js";

/** Pending operations of one channel; each settles once, by the native side or by failAll(). */
export class Pending {
  private readonly open = new Set<(e: Error) => void>();
  private failure: Error | null = null;

  /** A promise that follows `p`, unless failAll() fails it first. Rejections are mapped by `mapError`. */
  track<T>(p: Promise<T>, mapError: (e: unknown) => unknown): Promise<T> {
    if (this.failure) {
      p.catch(() => undefined);
      return Promise.reject(this.failure);
    }
    return new Promise<T>((resolve, reject) => {
      let settled = false;
      const fail = (e: Error): void => {
        if (settled) return;
        settled = true;
        this.open.delete(fail);
        reject(e);
      };
      this.open.add(fail);
      p.then(
        (v) => {
          if (settled) return;
          settled = true;
          this.open.delete(fail);
          resolve(v);
        },
        (e: unknown) => fail(mapError(e) as Error),
      );
    });
  }

  /**
   * An operation that finished before it returned (an inline buffer, a synchronous copy): resolved, or
   * rejected once failAll() ran. Nothing is left to fail, so nothing is tracked: tracking cost three
   * promises and four closures per small message (issue #18).
   */
  finished(): Promise<void> {
    return this.failure ? Promise.reject(this.failure) : Promise.resolve();
  }

  /** Fails every pending and later operation with `error`. */
  failAll(error: Error): void {
    this.failure ??= error;
    for (const fail of [...this.open]) fail(this.failure);
  }

  get size(): number {
    return this.open.size;
  }
}

/** A native failure seen by channel `name` on the pipe to `peer`, as the channel layer's error. */
export function channelError(name: string, peer: string, e: unknown): unknown {
  if (e instanceof NativeError && (e.code === "ECONNRESET" || e.code === "ECHANNELCLOSED"))
    return new WorkerUnavailableError(`${name} channel to ${peer}: ${e.message}`, peer);
  return e;
}

/** What a channel fails its pending operations with when its pipe closed with `error`. */
export function pipeClosedError(name: string, peer: string, error: Error): Error {
  if (error instanceof WorkerUnavailableError) return error;
  return new WorkerUnavailableError(`the ${name} channel to ${peer} lost its pipe: ${error.message}`, peer);
}

/** The default close() error. */
export function closedError(name: string, peer: string): WorkerUnavailableError {
  return new WorkerUnavailableError(
    `the ${name} channel to ${peer} was closed (its pipe closed or the peer left); retry once the worker is back`,
    peer,
  );
}

/** The peer's setup messages for one channel: awaited one by one during setup, then handed to a listener. */
export class Inbox {
  private readonly queue: SetupValue[] = [];
  private waiter: ((m: SetupValue) => void) | null = null;
  private listener: ((m: SetupValue) => void) | null = null;

  constructor(bootstrap: ChannelBootstrap) {
    bootstrap.onMessage((m) => {
      if (this.listener) this.listener(m);
      else if (this.waiter) {
        const w = this.waiter;
        this.waiter = null;
        w(m);
      } else this.queue.push(m);
    });
  }

  /** The next message; rejects with `onTimeout()` after timeoutMs. */
  next(timeoutMs: number, onTimeout: () => Error): Promise<SetupValue> {
    const queued = this.queue.shift();
    if (queued !== undefined) return Promise.resolve(queued);
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => {
        this.waiter = null;
        reject(onTimeout());
      }, timeoutMs);
      this.waiter = (m) => {
        clearTimeout(t);
        resolve(m);
      };
    });
  }

  /** Every later message (and those queued) goes to `cb`. */
  listen(cb: (m: SetupValue) => void): void {
    this.listener = cb;
    for (const m of this.queue.splice(0)) cb(m);
  }
}

/**
 * The same-host domain: boot id plus the namespaces the channel depends on. Where one is unknown,
 * a domain no other process can have (so the channel is offered, but never chosen, for this peer).
 */
export function sameHostDomain(host: HostIdentity, namespaces: readonly string[]): string {
  const parts = [host.bootId];
  for (const ns of namespaces) parts.push(`${ns}:${host.namespaces[ns] ?? ""}`);
  if (!host.bootId || parts.some((p) => p.endsWith(":"))) return `unknown-host/${host.pid}/${randomUUID()}`;
  return parts.join("/");
}

/**
 * Descriptors of the native channels start with a kind byte: INLINE (the bytes follow: buffers up
 * to INLINE_MAX ride in the control frame, skipping the data path's thread hand-offs), RECORD
 * (the channel's own fields follow), LANDED (shm only: the receiver's block that holds the bytes)
 * or SHARED (shm only: the bytes are a shared storage's file, sent over the channel's socket).
 */
export const INLINE = 1;
export const RECORD = 0;
/** shm: the bytes are already in the receiver's landing block named by the descriptor (./shm/tagged_channel.ts). */
export const LANDED = 2;
/** shm: a shared storage's file went to the receiver as transfer `id` (./shm/tagged_channel.ts). */
export const SHARED = 3;
/** shm: the receiver reads the bytes out of the sender's memory (process_vm_readv, ../cma): buffers above TPRPC_SHM_CMA_BYTES. */
export const DIRECT = 4;
export const INLINE_MAX = 16 * 1024;

export function inlineDescriptor(bytes: Uint8Array): Uint8Array {
  const d = smallBytes(1 + bytes.byteLength);
  d[0] = INLINE;
  d.set(bytes, 1);
  return d;
}

/**
 * `n` bytes for a descriptor, from Node's Buffer pool (below 4 KiB). NB: every new backing store V8
 * allocates (new Uint8Array(n > 64), or .buffer of a small one) starts a scavenge once 32 MiB of
 * young ArrayBuffers are alive; a received tensor alive across two of them (two descriptors while
 * its call runs) is promoted, and its landing block then waits for a mark-compact to be freed.
 */
export function smallBytes(n: number): Buffer {
  return Buffer.allocUnsafe(n);
}

/** Copies an INLINE descriptor's bytes into `into`; false when `d` is not inline. Throws on a length mismatch. */
export function takeInline(name: string, d: Uint8Array, into: Uint8Array): boolean {
  if (d.byteLength === 0 || d[0] !== INLINE) return false;
  if (d.byteLength - 1 !== into.byteLength)
    throw new ChannelNotViableError(
      `${name} channel: an inline transfer of ${d.byteLength - 1} bytes for a destination of ${into.byteLength}`,
    );
  into.set(d.subarray(1));
  return true;
}
