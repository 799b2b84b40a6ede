/**
 * In-memory transport connections for the pipe tests: one end a test drives by
 * hand (it records what the pipe wrote and pushes bytes in), or two ends
 * joined so two real Pipes talk to each other, each chunk delivered on a later
 * macrotask as a socket would.
 */
import { WorkerUnavailableError } from "../../sdk/errors/index.js";
import { FrameCutter, type Frame } from "../../sdk/pipe/frame.js";
import type { TransportConnection } from "../../sdk/transport/interface.js";

export class MemoryConnection implements TransportConnection {
  closed = false;
  /** Every chunk the pipe wrote, in order (copies). */
  readonly written: Uint8Array[] = [];
  /** The other end, when joined. */
  peer: MemoryConnection | null = null;
  private dataCb: ((chunk: Uint8Array) => void) | null = null;
  private readonly closeCbs: ((e: Error | null) => void)[] = [];

  constructor(readonly remote = "memory://peer") {}

  write(chunks: readonly Uint8Array[]): Promise<void> {
    if (this.closed) return Promise.reject(new WorkerUnavailableError("closed", this.remote));
    const copies = chunks.map((c) => new Uint8Array(c));
    this.written.push(...copies);
    const to = this.peer;
    if (to) setImmediate(() => copies.forEach((c) => to.push(c)));
    return Promise.resolve();
  }

  onData(cb: (chunk: Uint8Array) => void): void {
    this.dataCb = cb;
  }

  onClose(cb: (e: Error | null) => void): void {
    if (this.closed) cb(null);
    else this.closeCbs.push(cb);
  }

  close(error: Error | null = null): void {
    if (this.closed) return;
    this.closed = true;
    for (const cb of this.closeCbs.splice(0)) cb(error);
    const to = this.peer;
    if (to) setImmediate(() => to.close(new Error("connection closed by the peer")));
  }

  /** Bytes from the peer. */
  push(chunk: Uint8Array): void {
    if (!this.closed) this.dataCb?.(chunk);
  }

  /** What the pipe wrote, cut into frames. */
  frames(): Frame[] {
    const out: Frame[] = [];
    const cutter = new FrameCutter((f) => out.push(f));
    for (const c of this.written) cutter.push(c);
    return out;
  }
}

/** Two joined ends: what one writes, the other receives. */
export function memoryPair(): [MemoryConnection, MemoryConnection] {
  const a = new MemoryConnection("memory://acceptor");
  const b = new MemoryConnection("memory://connector");
  a.peer = b;
  b.peer = a;
  return [a, b];
}

/** Waits (bounded) until `cond` holds. */
export async function until(cond: () => boolean, ms = 5_000): Promise<void> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > ms) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((r) => setImmediate(r));
  }
}
