/**
 * bench/p2p_timeline.ts's probe, loaded with `node --import` in both processes: it wraps the pipe's send
 * (Pipe.sendNow), the shm channel's send (the land copy), a message frame's arrival (Pipe.onMessageFrame)
 * and its delivery (Pipe.deliver), and records [event, ns] pairs in globalThis.__tl, with the process's
 * garbage collections (PerformanceObserver "gc"). Timestamps: process.hrtime, CLOCK_MONOTONIC, one clock
 * for both processes. Only for that diagnostic; it patches internal methods.
 */
import { PerformanceObserver, performance } from "node:perf_hooks";
import { Pipe } from "../sdk/pipe/pipe.js";
import { TaggedChannel } from "../sdk/channel/shm/tagged_channel.js";

/** Event numbers (p2p_timeline.ts reads them). */
export const EV = {
  start: 0,
  sendIn: 1,
  landIn: 2,
  landOut: 3,
  sendOut: 4,
  frameIn: 5,
  delivIn: 7,
  delivOut: 8,
  end: 11,
  recvPosted: 15,
  gcStart: 20,
  gcEnd: 21,
} as const;

const log: number[] = [];
(globalThis as Record<string, unknown>).__tl = log;
export const nowNs = (): number => Number(process.hrtime.bigint() % 10_000_000_000_000n);

function wrap(proto: object, name: string, before: number, after: number): void {
  const p = proto as Record<string, (...a: unknown[]) => unknown>;
  const f = p[name]!;
  p[name] = function (this: unknown, ...a: unknown[]) {
    log.push(before, nowNs());
    const r = f.apply(this, a);
    log.push(after, nowNs());
    return r;
  };
}
wrap(Pipe.prototype, "sendNow", EV.sendIn, EV.sendOut);
wrap(TaggedChannel.prototype, "send", EV.landIn, EV.landOut);
wrap(Pipe.prototype, "onMessageFrame", EV.frameIn, EV.frameIn + 1);
wrap(Pipe.prototype, "deliver", EV.delivIn, EV.delivOut);
const offset = nowNs() - performance.now() * 1e6;
new PerformanceObserver((l) => {
  for (const e of l.getEntries())
    log.push(EV.gcStart, offset + e.startTime * 1e6, EV.gcEnd, offset + (e.startTime + e.duration) * 1e6);
}).observe({ entryTypes: ["gc"] });
