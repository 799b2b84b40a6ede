/**
 * The shared deadline lanes behind point-to-point timeouts (sdk/distributed/deadlines.ts): deadlines fire
 * after their duration and in order, cancelled ones never fire, cancelled entries do not pile up, and a lane
 * keeps the process alive only while a deadline in it is live. Real timers, short durations; each wait is
 * bounded by the test's own timeout.
 */
import { describe, expect, it } from "vitest";
import { deadline, laneStats } from "../../sdk/distributed/deadlines.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Ref'd timers of this process (an unref'd one is not listed). */
const refTimers = () => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;

describe("deadline lanes", () => {
  it("fire after their duration, in the order they were set; cancelled ones never fire", async () => {
    const ms = 37;
    const fired: number[] = [];
    const t0 = performance.now();
    const at: number[] = [];
    const ds = [0, 1, 2, 3].map((i) =>
      deadline(ms, () => {
        fired.push(i);
        at.push(performance.now() - t0);
      }),
    );
    ds[1]!.cancel();
    ds[1]!.cancel(); // twice is harmless
    expect(laneStats(ms)?.pending).toBe(3);
    await sleep(ms + 200);
    expect(fired).toEqual([0, 2, 3]);
    for (const a of at) expect(a).toBeGreaterThanOrEqual(ms - 1);
    // NB: the lane went away once empty
    expect(laneStats(ms)).toBeNull();
    ds[0]!.cancel(); // after firing: nothing happens
  }, 10_000);

  it("a deadline set after others were cancelled still fires on time", async () => {
    const ms = 41;
    const a = deadline(ms, () => {
      throw new Error("a cancelled deadline fired");
    });
    a.cancel();
    await sleep(20);
    let fired = 0;
    const t0 = performance.now();
    let after = 0;
    deadline(ms, () => {
      fired++;
      after = performance.now() - t0;
    });
    await sleep(ms + 200);
    expect(fired).toBe(1);
    expect(after).toBeGreaterThanOrEqual(ms - 1);
  }, 10_000);

  it("cancelled entries do not pile up, in order or out of order", () => {
    const ms = 600_001;
    // in order (operations finishing as they started): nothing kept
    for (let i = 0; i < 10_000; i++) deadline(ms, () => undefined).cancel();
    expect(laneStats(ms)).toMatchObject({ pending: 0, kept: 0 });
    // out of order: one long-lived deadline at the head, many set and cancelled behind it
    const head = deadline(ms, () => undefined);
    for (let i = 0; i < 10_000; i++) {
      const a = deadline(ms, () => undefined);
      const b = deadline(ms, () => undefined);
      b.cancel();
      a.cancel();
    }
    const s = laneStats(ms)!;
    expect(s.pending).toBe(1);
    expect(s.kept).toBeLessThan(200);
    head.cancel();
    expect(laneStats(ms)).toMatchObject({ pending: 0, kept: 0 });
  });

  it("a deadline past setTimeout's range waits (in steps) instead of firing at once", async () => {
    const ms = 2 ** 31 + 5;
    let fired = false;
    const d = deadline(ms, () => {
      fired = true;
    });
    await sleep(30);
    expect(fired).toBe(false);
    expect(laneStats(ms)?.pending).toBe(1);
    d.cancel();
    expect(laneStats(ms)?.pending).toBe(0);
  }, 10_000);

  it("keep the process alive only while a deadline is live", () => {
    const ms = 600_002;
    const before = refTimers();
    const d = deadline(ms, () => undefined);
    expect(refTimers()).toBe(before + 1);
    const e = deadline(ms, () => undefined);
    expect(refTimers()).toBe(before + 1); // one timer per lane
    d.cancel();
    expect(refTimers()).toBe(before + 1);
    e.cancel();
    expect(refTimers()).toBe(before);
    const f = deadline(ms, () => undefined);
    expect(refTimers()).toBe(before + 1);
    f.cancel();
    expect(refTimers()).toBe(before);
  });
});
