/**
 * When a worker starts the calls it serves, and when it hands the JS thread back to the event loop.
 *
 * A worker has one JS thread: while a target computes, nothing else runs there. No reply is
 * written, no frame is read, and an RRef fetch that arrived waits. When calls were started as soon as
 * they were decoded, the requests of one read computed back to back in one turn. A pipeline stage
 * that got four forwards at once answered none of them before all four were done, and its peer's
 * fetch of the first result waited just as long. The queue, step by step:
 * 1. `push` queues a call (REQUEST, REMOTE_CALL). A turn starts each call's target synchronously,
 *    up to its first await, which is where a model's forward or backward computes.
 * 2. While this turn of the event loop has run for less than `budgetMs`, the next call starts at
 *    once. So 64 small calls from one read still start in one turn and their replies leave in one
 *    write.
 * 3. Once the turn has used its budget, the remaining calls wait. The JS thread goes back to the
 *    event loop: the microtasks of the calls already run send their replies and the messages they
 *    made, and on the next turn the poll phase reads what came in meanwhile (an RRef fetch is
 *    answered; it does not queue, see serving.ts). Then the queue goes on with step 2.
 *
 * A turn runs in the loop's check phase (setImmediate), after the poll phase has read every
 * socket that was ready, so a fetch that came in the same poll as a request is answered before
 * that request computes. A call whose RRef arguments it must wait for is queued once they
 * settle (serving.ts), so its target, too, starts inside a turn. A target that awaits (a remote
 * fetch) gives the thread back there itself; what it does after that await runs outside the queue.
 */

/** Calls started back to back in one turn, at most this many ms of it (env TPRPC_SERVE_TURN_MS; not a number >= 0: 1). */
export const SERVE_TURN_MS = ((v) => (Number.isFinite(v) && v >= 0 ? v : 1))(
  Number(process.env.TPRPC_SERVE_TURN_MS ?? 1),
);

export class ServeQueue {
  private readonly jobs: (() => void)[] = [];
  /** A turn is scheduled (setImmediate). */
  private scheduled = false;

  constructor(private readonly budgetMs: number = SERVE_TURN_MS) {}

  /** Calls queued and not started yet. */
  get size(): number {
    return this.jobs.length;
  }

  /** Queues `start` (it must not throw); it runs in the next turn with budget left. */
  push(start: () => void): void {
    this.jobs.push(start);
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(this.turn);
  }

  /** Step 2 and 3: starts calls while the budget lasts; the rest wait for the next turn. */
  private readonly turn = (): void => {
    this.scheduled = false;
    const t0 = performance.now();
    while (this.jobs.length > 0) {
      if (performance.now() - t0 >= this.budgetMs) {
        // NB: scheduled from the check phase, so the loop's poll phase runs first: what arrived during
        // the computation is read, and a fetch answered, before the next call starts
        this.scheduled = true;
        setImmediate(this.turn);
        return;
      }
      this.jobs.shift()!();
    }
  };
}
