/**
 * When a worker starts the calls it serves, and when it hands the JS thread back to the event loop.
 *
 * A worker has one JS thread: while a target computes, nothing else runs there. No reply is
 * written, no frame is read, and an RRef fetch that arrived waits. When calls were started as soon as
 * they were decoded, the requests of one read computed back to back in one turn. A pipeline stage
 * that got four forwards at once answered none of them before all four were done, and its peer's
 * fetch of the first result waited just as long. The queue, step by step:
 * 1. `push` queues a call (REQUEST, REMOTE_CALL). The callee starts its target synchronously up to
 *    its first await, which is where a model's forward or backward computes.
 * 2. While this turn of the event loop has run for less than `budgetMs`, the next call starts at
 *    once. So 64 small calls from one read still start in one turn and their replies leave in one
 *    write.
 * 3. Once the turn has used its budget, the remaining calls wait. The JS thread goes back to the
 *    event loop: the microtasks of the calls already run send their replies and the messages they
 *    made, and on the next turn the poll phase reads what came in meanwhile (an RRef fetch is
 *    answered; it does not queue, see serving.ts). Then the queue goes on with step 2.
 *
 * A turn starts with the first call started in it and ends at the next check phase of the loop
 * (setImmediate). A call that awaits (a remote fetch, an RRef argument) gives the thread back
 * there itself, and its remaining work runs outside the queue when that await settles.
 */

/** Calls started back to back in one turn, at most this many ms of it (env TPRPC_SERVE_TURN_MS). */
export const SERVE_TURN_MS = Number(process.env.TPRPC_SERVE_TURN_MS ?? 1);

export class ServeQueue {
  private readonly jobs: (() => void)[] = [];
  /** performance.now() when this turn started its first call; 0 between turns. */
  private turnStart = 0;
  /** The budget ran out: the rest waits for the next turn (step 3). */
  private waiting = false;
  /** `run` is on the stack (a job that queues another does not start it re-entrantly). */
  private running = false;

  constructor(private readonly budgetMs: number = SERVE_TURN_MS) {}

  /** Calls queued and not started yet. */
  get size(): number {
    return this.jobs.length;
  }

  /** Queues `start` (it must not throw); it runs now when this turn's budget allows. */
  push(start: () => void): void {
    this.jobs.push(start);
    this.run();
  }

  private run(): void {
    if (this.waiting || this.running) return;
    this.running = true;
    try {
      while (this.jobs.length > 0) {
        const t = performance.now();
        if (this.turnStart === 0) {
          this.turnStart = t;
          setImmediate(this.endTurn);
        } else if (t - this.turnStart >= this.budgetMs) {
          this.waiting = true;
          return;
        }
        this.jobs.shift()!();
      }
    } finally {
      this.running = false;
    }
  }

  /** The check phase after a turn: a new turn may start; calls that waited start after one more poll phase. */
  private readonly endTurn = (): void => {
    this.turnStart = 0;
    if (!this.waiting) return;
    // NB: this check phase may follow the poll phase that started the turn without reading the sockets
    // again, so one more loop iteration: what arrived during the computation is read before the next one
    setImmediate(() => {
      this.waiting = false;
      this.run();
    });
  };
}
