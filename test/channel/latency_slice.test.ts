/**
 * The scheduler slice a pipe's thread asks for (sdk/channel/latency_slice.ts, native/src/channels/sched.cc):
 * which setting a process gets, that the kernel applies it to the calling thread without changing its
 * nice value, and that a thread started afterwards inherits it. Kernels before 6.12 have no per-thread
 * slice: there latencySlice reports 0 and only the settings are checked.
 */
import fs from "node:fs";
import os from "node:os";
import { Worker } from "node:worker_threads";
import { describe, expect, it } from "vitest";
import { latencySliceUs } from "../../sdk/channel/latency_slice.js";
import { nativeChannels } from "../../sdk/native/channels.js";
import { nativeOrSkip } from "../native/helpers.js";

/** se.slice in ns of the calling thread, from /proc (null where the kernel does not show it). */
function sliceNs(): number | null {
  let text: string;
  try {
    text = fs.readFileSync("/proc/thread-self/sched", "utf8");
  } catch {
    return null; // NB: a kernel without CONFIG_SCHED_DEBUG, or a sandbox, has no such file
  }
  const m = /^se\.slice\s*:\s*(\d+)/m.exec(text);
  return m ? Number(m[1]) : null;
}

describe("latency slice", () => {
  it("defaults to 100 us, reads TPRPC_SCHED_SLICE_US (0 or 100-100000), else falls back to the default", () => {
    expect(latencySliceUs({})).toBe(100);
    expect(latencySliceUs({ TPRPC_SCHED_SLICE_US: "0" })).toBe(0);
    expect(latencySliceUs({ TPRPC_SCHED_SLICE_US: "250" })).toBe(250);
    expect(latencySliceUs({ TPRPC_SCHED_SLICE_US: "50" })).toBe(100);
    expect(latencySliceUs({ TPRPC_SCHED_SLICE_US: "fast" })).toBe(100);
    expect(latencySliceUs({ TPRPC_SCHED_SLICE_US: "200000" })).toBe(100);
  });

  it.skipIf(nativeOrSkip().skip !== null)(
    "sets the calling thread's slice, keeps its nice value, and threads started later inherit it",
    async () => {
      const ch = nativeChannels()!;
      const nice = os.getPriority();
      const got = ch.latencySlice(300);
      expect(os.getPriority()).toBe(nice);
      if (got === 0) {
        console.warn(
          "[test/channel] no per-thread scheduler slice here (Linux < 6.12, or this thread is not under SCHED_OTHER): nothing applied",
        );
        return;
      }
      expect(got).toBe(300);
      // NB: out of the kernel's 0.1-100 ms (NaN too), nothing is asked for: the slice stays
      for (const us of [50, 200_000, Number.NaN, Number.POSITIVE_INFINITY]) expect(ch.latencySlice(us)).toBe(300);
      const own = sliceNs();
      if (own === null) {
        console.warn(
          "[test/channel] no /proc/thread-self/sched here: the kernel's own view of the slice is not checked",
        );
        expect(ch.latencySlice(100)).toBe(100);
        return;
      }
      expect(own).toBe(300_000);
      const inherited = await new Promise<number | null>((resolve, reject) => {
        const w = new Worker(
          `const m = /^se\\.slice\\s*:\\s*(\\d+)/m.exec(require("fs").readFileSync("/proc/thread-self/sched", "utf8"));
           require("worker_threads").parentPort.postMessage(m ? Number(m[1]) : null);`,
          { eval: true },
        );
        const t = setTimeout(() => reject(new Error("the worker thread did not answer in 10 s")), 10_000);
        w.once("message", (v: number | null) => {
          clearTimeout(t);
          resolve(v);
          void w.terminate();
        });
        w.once("error", reject);
      });
      expect(inherited).toBe(300_000);
      expect(ch.latencySlice(100)).toBe(100);
    },
  );
});
