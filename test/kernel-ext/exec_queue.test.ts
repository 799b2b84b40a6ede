/**
 * The kernel's execute queue (kernel-ext/exec_queue.ts): cells run in arrival order; a failure
 * with stop_on_error aborts what was received before it (including what `settle` reads), and
 * nothing received after; a failure with stop_on_error false or silent aborts nothing.
 */
import { describe, expect, it } from "vitest";
import { ExecQueue } from "../../kernel-ext/exec_queue.js";

describe("ExecQueue", () => {
  const cell = (ok: boolean, log: string[], name: string) => async () => {
    log.push(name);
    await new Promise((r) => setTimeout(r, 5));
    return { ok, executionCount: log.length };
  };

  it("aborts the requests queued behind a cell that failed with stop_on_error, and runs later arrivals", async () => {
    const log: string[] = [];
    const q = new ExecQueue(async () => undefined);
    const a = q.add({}, cell(false, log, "a"));
    const b = q.add({ stop_on_error: true }, cell(true, log, "b"));
    const c = q.add({ stop_on_error: false }, cell(true, log, "c"));
    expect(await a).toEqual({ status: "error", executionCount: 1 });
    expect(await b).toEqual({ status: "aborted" });
    expect(await c).toEqual({ status: "aborted" });
    expect(await q.add({}, cell(true, log, "d"))).toEqual({ status: "ok", executionCount: 2 });
    expect(log).toEqual(["a", "d"]);
  });

  it("counts the requests `settle` lets in as received before the failure", async () => {
    const log: string[] = [];
    let late: Promise<unknown> | null = null;
    const q: ExecQueue = new ExecQueue(async () => {
      late ??= q.add({}, cell(true, log, "in the socket"));
    });
    expect((await q.add({}, cell(false, log, "a"))).status).toBe("error");
    expect(await late).toEqual({ status: "aborted" });
    expect(log).toEqual(["a"]);
  });

  it("aborts nothing after a failure whose request said stop_on_error false, or was silent", async () => {
    const log: string[] = [];
    const q = new ExecQueue(async () => undefined);
    const r = await Promise.all([
      q.add({ stop_on_error: false }, cell(false, log, "a")),
      q.add({}, cell(true, log, "b")),
      q.add({ silent: true }, cell(false, log, "c")),
      q.add({}, cell(true, log, "d")),
    ]);
    expect(r.map((x) => x.status)).toEqual(["error", "ok", "error", "ok"]);
    expect(log).toEqual(["a", "b", "c", "d"]);
  });
});
