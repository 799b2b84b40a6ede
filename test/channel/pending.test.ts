/**
 * sdk/channel/native_common.ts's Pending: a tracked operation fails with failAll()'s error, and an
 * operation that finished at once (finished(), an inline buffer) resolves untracked, but rejects once
 * the channel has failed.
 */
import { describe, expect, it } from "vitest";
import { Pending } from "../../sdk/channel/native_common.js";

describe("Pending", () => {
  it("finished() resolves without tracking; after failAll it rejects with that error", async () => {
    const p = new Pending();
    await expect(p.finished()).resolves.toBeUndefined();
    expect(p.size).toBe(0);
    let release!: () => void;
    const tracked = p.track(new Promise<void>((r) => (release = r)), (e) => e);
    expect(p.size).toBe(1);
    const err = new Error("pipe closed");
    p.failAll(err);
    await expect(tracked).rejects.toBe(err);
    release();
    await expect(p.finished()).rejects.toBe(err);
    expect(p.size).toBe(0);
  });
});
