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
  const m = /^se\.slice\s*:\s*(\d+)/m.exec(fs.readFileSync("/proc/thread-self/sched", "utf8"));
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
        console.warn("[test/channel] this kernel has no per-thread scheduler slice (Linux < 6.12): nothing applied");
        return;
      }
      expect(got).toBe(300);
      expect(sliceNs()).toBe(300_000);
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
