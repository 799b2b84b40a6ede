/**
 * Work: the handle of an asynchronous distributed operation (isend, irecv,
 * a collective with asyncOp), as torch.distributed's Work. JS cannot block,
 * so wait() returns a Promise; the operation's own timeout (the RPC timeout
 * or the call's timeoutMs) bounds it whether or not anyone waits.
 */
import { RpcTimeoutError } from "../errors/index.js";
import { LongTimer, checkTimeoutMs } from "../rpc/timeouts.js";

export class Work<T = void> {
  private done = false;
  private failure: Error | null = null;
  /** Settles when the operation completes (resolves to its result: a sender's rank for irecv). */
  readonly promise: Promise<T>;

  constructor(
    promise: Promise<T>,
    /** What the operation is, for messages ("isend to rank 2 (tag 0)"). */
    readonly what: string,
  ) {
    // NB: one reaction that records the outcome and never rejects (no .catch needed): `promise` itself is
    // what callers await, and this reaction, attached first, runs before theirs (done is set when they
    // resume); it also marks a failure as handled, so a Work nobody waits on is no unhandled rejection
    this.promise = promise;
    promise.then(
      () => {
        this.done = true;
      },
      (e: Error) => {
        this.done = true;
        this.failure = e;
      },
    );
  }

  /** True once the operation finished, successfully or not. */
  isCompleted(): boolean {
    return this.done;
  }

  /** True once it finished without an error. */
  isSuccess(): boolean {
    return this.done && this.failure === null;
  }

  /** The error it failed with, or null. */
  exception(): Error | null {
    return this.failure;
  }

  /** torch's get_future(): the promise of the result. */
  getFuture(): Promise<T> {
    return this.promise;
  }

  /**
   * Resolves when the operation completes; with `timeoutMs` (> 0) rejects with RpcTimeoutError
   * when it has not completed by then (the operation itself goes on, bounded by its own timeout).
   */
  wait(timeoutMs?: number): Promise<T> {
    if (timeoutMs === undefined || timeoutMs === 0 || this.done) return this.promise;
    const ms = checkTimeoutMs(timeoutMs, "Work.wait(timeoutMs)");
    return new Promise<T>((resolve, reject) => {
      const timer = new LongTimer(ms, () =>
        reject(new RpcTimeoutError(`${this.what} did not complete within ${ms} ms (Work.wait)`, ms)),
      );
      this.promise.then(
        (v) => {
          timer.cancel();
          resolve(v);
        },
        (e: Error) => {
          timer.cancel();
          reject(e);
        },
      );
    });
  }
}
