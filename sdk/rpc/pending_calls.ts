/**
 * The calls an agent waits on, by message id: each settles once, by its reply
 * (RESPONSE or ERROR), its timeout, its peer's departure, a cancellation or
 * shutdown, whichever comes first; later replies for it are dropped.
 */
import { RpcTimeoutError } from "../errors/index.js";
import { type CallRecord, nowMs } from "./profiler.js";
import { LongTimer } from "./timeouts.js";

export interface PendingCall {
  /** The worker the call went to. */
  readonly peer: string;
  /** Resends the full record once, when the callee lost the shipped code; null when none. */
  retry: (() => void) | null;
  /** The profiler's record of this call (while rpc.profiler is enabled). */
  readonly prof: CallRecord | null;
  /** What was called ("call f", "remote rref.forward"), and when (performance.now()), for debugState. */
  readonly what: string;
  readonly since: number;
  resolve(v: unknown): void;
  reject(e: Error): void;
  timer: LongTimer | null;
}

export class PendingCalls {
  private readonly calls = new Map<number, PendingCall>();
  private nextId = 1;

  get size(): number {
    return this.calls.size;
  }

  /** A fresh message id. */
  newId(): number {
    return this.nextId++;
  }

  /** Waits for the reply to call `id` to `peer`; timeoutMs 0 = none. */
  open(id: number, peer: string, timeoutMs: number, prof: CallRecord | null, what = ""): Promise<unknown> {
    return new Promise<unknown>((resolve, reject) => {
      const p: PendingCall = { resolve, reject, timer: null, peer, retry: null, prof, what, since: performance.now() };
      if (timeoutMs > 0)
        p.timer = new LongTimer(timeoutMs, () => {
          this.calls.delete(id);
          reject(new RpcTimeoutError(`RPC to "${peer}" ran out of time after ${timeoutMs} ms (timeoutMs)`, timeoutMs));
        });
      this.calls.set(id, p);
    });
  }

  get(id: number): PendingCall | undefined {
    return this.calls.get(id);
  }

  /** Settles call `id` (no-op when it already settled): rejects with `error`, else resolves to `value`. */
  settle(id: number, error: Error | null, value?: unknown): void {
    const p = this.calls.get(id);
    if (!p) return;
    this.calls.delete(id);
    p.timer?.cancel();
    if (p.prof) {
      p.prof.replyAt ??= nowMs();
      if (error) p.prof.error = error.message;
    }
    if (error) p.reject(error);
    else p.resolve(value);
  }

  /** One line per call waited on (./state_dump.ts). */
  debugState(): string[] {
    const now = performance.now();
    return [...this.calls].map(
      ([id, p]) => `waits on call ${id} to ${p.peer}: ${p.what || "?"}, for ${(now - p.since).toFixed(0)} ms`,
    );
  }

  /** Rejects every call to `peer` with `error()`. */
  failPeer(peer: string, error: () => Error): void {
    for (const [id, p] of this.calls) if (p.peer === peer) this.settle(id, error());
  }

  /** Rejects every call with `reason`; returns how many. */
  failAll(reason: Error): number {
    const ids = [...this.calls.keys()];
    for (const id of ids) this.settle(id, reason);
    return ids.length;
  }
}
