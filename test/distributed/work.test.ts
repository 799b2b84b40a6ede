/**
 * sdk/distributed/work.ts: a Work records its outcome before anyone awaiting its promise resumes, a
 * failed Work nobody waits on is no unhandled rejection, and wait() still rejects with the failure.
 */
import { describe, expect, it } from "vitest";
import { Work } from "../../sdk/distributed/work.js";
import { RpcTimeoutError } from "../../sdk/index.js";

describe("Work", () => {
  it("is completed (and successful) when an await of its promise or wait() resumes", async () => {
    let resolve!: (v: number) => void;
    const w = new Work(new Promise<number>((r) => (resolve = r)), "irecv from rank 1 (tag 0)");
    expect(w.isCompleted()).toBe(false);
    const seen: boolean[] = [];
    const a = w.promise.then(() => seen.push(w.isCompleted() && w.isSuccess()));
    const b = w.wait().then(() => seen.push(w.isCompleted()));
    resolve(3);
    await Promise.all([a, b]);
    expect(seen).toEqual([true, true]);
    expect(await w.getFuture()).toBe(3);
    expect(w.exception()).toBeNull();
  });

  it("a failed Work is no unhandled rejection; wait() rejects and exception() names the error", async () => {
    const unhandled: unknown[] = [];
    const on = (e: unknown) => unhandled.push(e);
    process.on("unhandledRejection", on);
    try {
      const err = new Error("peer gone");
      const w = new Work(Promise.reject(err), "isend to rank 2 (tag 0)");
      await new Promise((r) => setTimeout(r, 50));
      expect(unhandled).toEqual([]);
      expect(w.isCompleted() && !w.isSuccess()).toBe(true);
      expect(w.exception()).toBe(err);
      await expect(w.wait()).rejects.toBe(err);
      // wait(timeoutMs) on one that never completes: RpcTimeoutError, the Work stays pending
      const never = new Work(new Promise<void>(() => undefined), "irecv from rank 1 (tag 5)");
      await expect(never.wait(30)).rejects.toBeInstanceOf(RpcTimeoutError);
      expect(never.isCompleted()).toBe(false);
    } finally {
      process.off("unhandledRejection", on);
    }
  });
});
