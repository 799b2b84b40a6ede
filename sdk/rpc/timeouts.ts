/**
 * RPC timeouts: validating the ms values users pass (per call, per group) and
 * timers that also work past setTimeout's range.
 *
 * PyTorch takes timeouts in seconds as floats, where 0 means "no timeout";
 * here they are milliseconds, 0 still means none, and anything else that is
 * not a finite number >= 0 is a ValueError at the call, never a silent
 * "no timeout" (which is what setTimeout makes of `NaN` and negatives).
 */
import { ValueError } from "../errors/index.js";

/** setTimeout's largest delay; a larger one fires at once (Node warns and uses 1 ms). */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** Throws ValueError unless `ms` is a finite number >= 0; `what` names it in the message. */
export function checkTimeoutMs(ms: unknown, what: string): number {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0)
    throw new ValueError(
      `${what} must be a finite number of milliseconds >= 0 (0 = no timeout), got ${typeof ms === "number" ? ms : typeof ms}`,
    );
  return ms;
}

/** A cancellable timer for any finite delay: delays past MAX_TIMER_MS are waited in steps. */
export class LongTimer {
  private handle: NodeJS.Timeout | null = null;

  constructor(ms: number, onFire: () => void) {
    const due = Date.now() + ms;
    const arm = (left: number) => {
      this.handle = setTimeout(
        () => {
          const rest = due - Date.now();
          if (rest > 0) arm(rest);
          else {
            this.handle = null;
            onFire();
          }
        },
        Math.min(left, MAX_TIMER_MS),
      );
    };
    arm(ms);
  }

  /** Lets the process exit while only this timer is waiting. */
  unref(): this {
    this.handle?.unref();
    return this;
  }

  cancel(): void {
    if (this.handle) clearTimeout(this.handle);
    this.handle = null;
  }
}
