/**
 * The profiler's clock (sdk/rpc/profiler.ts nowMs): the wall clock with sub-millisecond precision, anchored
 * at a tick of Date.now() rather than on performance.timeOrigin (which a process preempted at startup
 * carries off by as long), so spans of several processes of one machine fall on one axis.
 */
import { describe, expect, it } from "vitest";
import { nowMs } from "../../sdk/rpc/profiler.js";

describe("profiler clock", () => {
  it("reads Date.now() to the millisecond, with sub-millisecond steps that never go back", () => {
    let last = nowMs();
    let fractional = false;
    for (let i = 0; i < 2_000; i++) {
      const before = Date.now();
      const t = nowMs();
      const after = Date.now();
      // NB: Date.now() floors: the true time lies in [before, after + 1)
      expect(t).toBeGreaterThanOrEqual(before - 0.05);
      expect(t).toBeLessThan(after + 1.05);
      expect(t).toBeGreaterThanOrEqual(last);
      if (t % 1 !== 0) fractional = true;
      last = t;
    }
    expect(fractional).toBe(true);
  });
});
