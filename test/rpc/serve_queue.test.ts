/**
 * ServeQueue (sdk/rpc/serve_queue.ts): calls start back to back while a turn has budget left; after
 * that, the microtasks of the calls already started (their replies) run before the next call starts.
 */
import { describe, expect, it } from "vitest";
import { ServeQueue } from "../../sdk/rpc/serve_queue.js";

/** Pushes three calls that each spin `ms` and queue a microtask (their "reply"); resolves to the order of events. */
function run(q: ServeQueue, ms: number): Promise<string[]> {
  const log: string[] = [];
  return new Promise((resolve) => {
    for (const k of [1, 2, 3])
      q.push(() => {
        log.push(`start ${k}`);
        const t = performance.now();
        while (performance.now() - t < ms);
        queueMicrotask(() => {
          log.push(`reply ${k}`);
          if (k === 3) resolve(log);
        });
      });
  });
}

describe("ServeQueue", () => {
  it("lets each reply out before the next call starts once a call used the turn's budget", async () => {
    expect(await run(new ServeQueue(1), 5)).toEqual(["start 1", "reply 1", "start 2", "reply 2", "start 3", "reply 3"]);
  });

  it("starts cheap calls back to back in one turn (their replies leave together)", async () => {
    expect(await run(new ServeQueue(1_000), 0)).toEqual([
      "start 1",
      "start 2",
      "start 3",
      "reply 1",
      "reply 2",
      "reply 3",
    ]);
  });

  it("starts nothing synchronously in push: a turn runs after the current task", async () => {
    const q = new ServeQueue(1);
    let started = false;
    q.push(() => (started = true));
    expect(started).toBe(false);
    await new Promise((r) => setImmediate(r));
    expect(started).toBe(true);
    expect(q.size).toBe(0);
  });
});
