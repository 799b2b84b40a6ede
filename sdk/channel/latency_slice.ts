/**
 * A short scheduler slice for the thread that opens a pipe (issue 23, "wake-ups in shm under
 * contention"), so that a process woken by a message gets its core at once on cores that busy
 * processes keep full.
 *
 * Why: a round trip wakes a sleeping process twice (the request's frame, the reply's). Under EEVDF
 * (Linux 6.6+) the running task keeps its core until its slice (about 1.4 ms on this 2-core box) is
 * used, noticed at the next tick (4 ms at 250 Hz), unless the woken task has a shorter slice than
 * the running one (Linux 6.12+, a thread's own slice set with sched_setattr; no privilege needed). Measured
 * (2 busy processes beside a master and a worker, shm, 4 MB rpcSync round trips, interleaved pairs,
 * the loaded 2-core box): 6 pairs of 400 calls, mean 3.13 ms with the default slice, 2.57 ms with
 * 100 us (better in 5); with the growing percent of ./heap_headroom.ts as well, 5 pairs of 400 calls
 * 2.61 vs 2.49 ms (better in 3) and 5 of 800 calls 3.41 vs 2.93 ms (better in 4). The segments that
 * shrank are the two wake-ups ("wire" in bench/p2p_timeline.ts: p90 about 4 ms before, about 1 after).
 * A slice changes when the thread may preempt and be preempted, not its share of the CPU (its nice
 * value is kept).
 *
 * What: `ensureLatencySlice()` (called by the pipe layer when a pipe opens, once per JS thread) asks
 * for TPRPC_SCHED_SLICE_US (default 100; 0 leaves the kernel's default) for the calling thread; the
 * threads and processes it starts later inherit it (Linux keeps a custom slice across clone and fork):
 * the channels' sender, receiver and watcher threads, but also libuv's pool threads started later,
 * worker_threads and child processes. Threads with a policy other than SCHED_OTHER are left alone;
 * kernels before 6.12 ignore it (native/src/channels/sched.cc).
 */
import { nativeChannels } from "../native/channels.js";
import { debug } from "../util/index.js";

const DEFAULT_US = 100;
let applied: number | undefined;

/** The slice in microseconds this thread should ask for: TPRPC_SCHED_SLICE_US (0 or 100-100000), else 100. */
export function latencySliceUs(env: NodeJS.ProcessEnv = process.env): number {
  const v = env.TPRPC_SCHED_SLICE_US;
  if (v === undefined || v === "") return DEFAULT_US;
  const n = Number(v);
  return Number.isInteger(n) && (n === 0 || (n >= 100 && n <= 100_000)) ? n : DEFAULT_US;
}

/** Asks for the slice once per JS thread (see the file comment); returns the slice in effect in us (0: none). */
export function ensureLatencySlice(): number {
  if (applied !== undefined) return applied;
  const us = latencySliceUs();
  const ch = us > 0 ? nativeChannels() : null;
  applied = 0;
  // NB: a tuning call: never what stops a pipe from opening (an addon built before it has no latencySlice,
  // and calling it throws a TypeError)
  try {
    if (ch) applied = ch.latencySlice(us);
  } catch (e) {
    debug(1, "sched", `no scheduler slice: ${(e as Error).message}`);
  }
  debug(1, "sched", `scheduler slice ${applied} us (asked for ${us}; TPRPC_SCHED_SLICE_US)`);
  return applied;
}
