/**
 * The RPC profiler (`rpc.profiler`): while enabled, every call this worker
 * makes (rpcSync, rpcAsync, remote, RRef fetches) is recorded with its
 * target, peer, bytes each way and times — queued (the call was made), sent
 * (its message left through the pipe), reply (the answer arrived) — and,
 * from the callee, the span its target ran (callees report it when the
 * caller's profiler is on; times are wall-clock ms, so spans from one host
 * line up).
 *
 *   rpc.profiler.enable();
 *   await Promise.all([rpc.rpcAsync("worker1", f, [x]), rpc.rpcAsync("worker2", f, [x])]);
 *   rpc.profiler.disable();
 *   rpc.profiler.dumpChromeTrace("trace.json");   // open in chrome://tracing or ui.perfetto.dev
 *
 * The Chrome trace has one process (this worker) with one track group per
 * peer: calls to a peer that overlap (rpcAsync) are laid on as many tracks as
 * needed so none overlaps another on its track; each call's span holds a
 * "send" slice (queued → sent) and the callee's "run" slice.
 */
import fs from "node:fs";

export type CallKind = "call" | "remote" | "fetch";

export interface CallRecord {
  /** The call's message id (unique per agent). */
  id: number;
  kind: CallKind;
  /**
   * A readable name of the target: builtin path, registered name, module ref, the shipped function's name,
   * `rref.METHOD` for an RRef proxy's call, or what users call tprpc's internal targets ("backward" for
   * distributed autograd's propagation to a worker, "optimizer.step", ...).
   */
  target: string;
  peer: string;
  /** Bytes this call sent (frame, payload and tensors), once sent. */
  bytesSent: number;
  /** Bytes of the reply, once it arrived. */
  bytesReceived: number;
  /** Wall-clock ms (nowMs()). */
  queuedAt: number;
  sentAt: number | null;
  replyAt: number | null;
  /** The callee's run of the target, on the callee's clock (ms), when reported. */
  calleeStart: number | null;
  calleeEnd: number | null;
  /** The error's message when the call failed. */
  error: string | null;
}

/**
 * Wall-clock ms with sub-ms precision, comparable across the processes of one machine (the profiler
 * puts spans of several processes on one axis). Not performance.timeOrigin + performance.now():
 * timeOrigin pairs two clocks Node reads one after the other at startup, and a process preempted
 * between the two reads (a loaded machine) runs that much ahead for its whole life (a CI run saw two
 * workers' spans 2.3 ms out of order). Instead the offset is taken at the first call, at the instant
 * Date.now() moves to its next millisecond; a read interrupted for longer than that tick is taken again.
 */
export function nowMs(): number {
  return (clockOffset ??= wallClockOffset()) + performance.now();
}
let clockOffset: number | undefined;

/**
 * Date.now() - performance.now() at a tick of Date.now(), within 25 us. Each read of Date.now() is
 * bracketed by two of performance.now(), so the tick, which came after one read and by the next, lies
 * between the first bracket's start and the second's end. A bracket pair wider than 50 us (this thread
 * was preempted in it) is not used: it tries again.
 */
function wallClockOffset(): number {
  for (let attempt = 0; attempt < 20; attempt++) {
    let from = performance.now();
    const start = Date.now();
    // NB: bounded: Date.now() ticks every millisecond
    for (let i = 0; i < 10_000_000; i++) {
      const m1 = performance.now();
      const wall = Date.now();
      const m2 = performance.now();
      if (wall !== start) {
        if (wall === start + 1 && m2 - from < 0.05) return wall - (from + m2) / 2;
        break;
      }
      from = m1;
    }
  }
  return performance.timeOrigin;
}

/** What the records call tprpc's internal targets (the names users know them by). */
const INTERNAL_NAMES: Readonly<Record<string, string>> = {
  __tprpcDistAutogradPropagate: "backward",
  __tprpcDistAutogradCleanup: "distAutograd cleanup",
  __tprpcRRefBackward: "rref.backward",
  __tprpcDistOptimCreate: "DistributedOptimizer",
  __tprpcDistOptimStep: "optimizer.step",
  __tprpcDistOptimSetLr: "optimizer.setLr",
  __tprpcRemoteModuleParams: "RemoteModule.parameters",
  __tprpcRemoteModuleTo: "RemoteModule.to",
};

/** A readable name for a call target; `method` names an RRef proxy's method (`rref.rpcSync().forward(x)`). */
export function targetName(target: unknown, method?: string): string {
  if (method !== undefined) return `rref.${method}`;
  if (typeof target === "string") return INTERNAL_NAMES[target] ?? target;
  if (typeof target === "function") return target.name || "(anonymous)";
  return target === null ? "(rref fetch)" : typeof target;
}

/** A stretch of time on a worker (wall-clock ms), as a timeline draws it. */
export interface Span {
  worker: string;
  name: string;
  start: number;
  end: number;
}

/**
 * Milliseconds during which some span of `a` and some span of `b` ran at the same time (the length of
 * the intersection of their unions). For a pipeline, `a` and `b` are two stages' forward spans of one
 * step: more than 0 means the stages computed at once; a pipeline that runs one micro-batch through
 * both stages before starting the next gives 0.
 */
export function overlapMs(a: readonly Span[], b: readonly Span[]): number {
  const union = (spans: readonly Span[]) => {
    const out: [number, number][] = [];
    for (const s of [...spans].sort((x, y) => x.start - y.start)) {
      const last = out.at(-1);
      if (last && s.start <= last[1]) last[1] = Math.max(last[1], s.end);
      else if (s.end > s.start) out.push([s.start, s.end]);
    }
    return out;
  };
  const ua = union(a);
  const ub = union(b);
  let total = 0;
  for (const [s1, e1] of ua) for (const [s2, e2] of ub) total += Math.max(0, Math.min(e1, e2) - Math.max(s1, s2));
  return total;
}

export class RpcProfiler {
  private on = false;
  private readonly list: CallRecord[] = [];
  /** Records kept at most (oldest dropped first). */
  maxRecords = 1_000_000;

  get enabled(): boolean {
    return this.on;
  }

  enable(): void {
    this.on = true;
  }

  disable(): void {
    this.on = false;
  }

  clear(): void {
    this.list.length = 0;
  }

  /** overlapMs (above): how long spans of `a` and of `b` ran at once, e.g. two pipeline stages' forwards. */
  overlapMs(a: readonly Span[], b: readonly Span[]): number {
    return overlapMs(a, b);
  }

  /** The records so far (copies), oldest first. */
  records(): CallRecord[] {
    return this.list.map((r) => ({ ...r }));
  }

  /** @internal the agent starts a record when a call is made (only while enabled). */
  begin(id: number, kind: CallKind, target: unknown, peer: string, method?: string): CallRecord | null {
    if (!this.on) return null;
    const r: CallRecord = {
      id,
      kind,
      target: targetName(target, method),
      peer,
      bytesSent: 0,
      bytesReceived: 0,
      queuedAt: nowMs(),
      sentAt: null,
      replyAt: null,
      calleeStart: null,
      calleeEnd: null,
      error: null,
    };
    this.list.push(r);
    if (this.list.length > this.maxRecords) this.list.shift();
    return r;
  }

  /** The records as Chrome trace-event JSON (an object with `traceEvents`). */
  chromeTrace(worker = "this worker"): { traceEvents: Record<string, unknown>[]; displayTimeUnit: string } {
    const events: Record<string, unknown>[] = [];
    const pid = 1;
    events.push({ ph: "M", name: "process_name", pid, tid: 0, args: { name: `tprpc ${worker} (caller)` } });
    const peers = [...new Set(this.list.map((r) => r.peer))].sort();
    const us = (ms: number) => Math.round(ms * 1000);
    peers.forEach((peer, pi) => {
      // greedy track assignment: a call goes on the first track of its peer whose last call has ended
      const calls = this.list.filter((r) => r.peer === peer).sort((a, b) => a.queuedAt - b.queuedAt);
      const trackEnds: number[] = [];
      for (const r of calls) {
        const end = r.replyAt ?? r.sentAt ?? r.queuedAt;
        let t = trackEnds.findIndex((e) => e <= r.queuedAt);
        if (t < 0) {
          t = trackEnds.length;
          trackEnds.push(end);
          events.push({
            ph: "M",
            name: "thread_name",
            pid,
            tid: pi * 1000 + t + 1,
            args: { name: `→ ${peer}${t ? ` #${t}` : ""}` },
          });
          events.push({
            ph: "M",
            name: "thread_sort_index",
            pid,
            tid: pi * 1000 + t + 1,
            args: { sort_index: pi * 1000 + t },
          });
        } else trackEnds[t] = end;
        const tid = pi * 1000 + t + 1;
        const args = {
          peer,
          kind: r.kind,
          bytesSent: r.bytesSent,
          bytesReceived: r.bytesReceived,
          ...(r.error ? { error: r.error } : {}),
        };
        events.push({
          ph: "X",
          cat: "rpc",
          name: r.target,
          pid,
          tid,
          ts: us(r.queuedAt),
          dur: us(end) - us(r.queuedAt),
          args,
        });
        if (r.sentAt !== null)
          events.push({
            ph: "X",
            cat: "rpc.send",
            name: "send",
            pid,
            tid,
            ts: us(r.queuedAt),
            dur: us(r.sentAt) - us(r.queuedAt),
          });
        if (r.calleeStart !== null && r.calleeEnd !== null) {
          // NB: the callee's clock; clamp into the call's span so the slice nests (skew across hosts)
          const s = Math.max(r.calleeStart, r.sentAt ?? r.queuedAt);
          const e = Math.max(s, Math.min(r.calleeEnd, end));
          events.push({ ph: "X", cat: "rpc.run", name: `run on ${peer}`, pid, tid, ts: us(s), dur: us(e) - us(s) });
        }
      }
    });
    return { traceEvents: events, displayTimeUnit: "ms" };
  }

  /** Writes the Chrome trace to `path` (when given) and returns it as a JSON string. */
  dumpChromeTrace(path?: string, worker?: string): string {
    const text = JSON.stringify(this.chromeTrace(worker));
    if (path) fs.writeFileSync(path, text);
    return text;
  }
}

/** The process's profiler (PyTorch's profiler is process-wide too). */
export const profiler = new RpcProfiler();
