/**
 * The kernel's execute queue: cells run one at a time in arrival order, and a failure
 * aborts requests as ipykernel does (ipykernel 7's kernelbase, with its default
 * `stop_on_error_timeout` of 0):
 *
 * 1. each execute_request gets an arrival ticket when the kernel reads it;
 * 2. a cell that fails, when its request did not say `stop_on_error: false` (the default is
 *    true) and is not `silent`, marks every request received so far — first letting the
 *    requests already waiting in the socket be read (`settle`), as ipykernel flushes its
 *    shell stream;
 * 3. a marked request is answered without running (`aborted`); one that arrives after
 *    the mark runs.
 *
 * So "Run all" in JupyterLab (every cell sent at once) stops at the first error, and a
 * client that sends `stop_on_error: false` (nbclient with allow-errors, which sends the
 * next cell only after the reply) loses no cell. tslab's own queue instead aborted every
 * request arriving within 200 ms after any error.
 */
export interface ExecRequestFlags {
  silent?: boolean;
  stop_on_error?: boolean;
}

export type ExecOutcome = { status: "ok" | "error"; executionCount?: number } | { status: "aborted" };

export class ExecQueue {
  private arrivals = 0;
  private abortThrough = 0;
  private tail: Promise<unknown> = Promise.resolve();

  /** `settle` resolves once the requests already received have been added (step 2). */
  constructor(private readonly settle: () => Promise<void>) {}

  add(req: ExecRequestFlags, run: () => Promise<{ ok: boolean; executionCount?: number }>): Promise<ExecOutcome> {
    const ticket = ++this.arrivals;
    const p = this.tail.then(async (): Promise<ExecOutcome> => {
      if (ticket <= this.abortThrough) return { status: "aborted" };
      const r = await run();
      if (!r.ok && !req.silent && req.stop_on_error !== false) {
        await this.settle();
        this.abortThrough = this.arrivals;
      }
      return { status: r.ok ? "ok" : "error", executionCount: r.executionCount };
    });
    // NB: one request's failure must not reject the ones queued behind it.
    this.tail = p.catch(() => undefined);
    return p;
  }
}
