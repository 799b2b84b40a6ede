/**
 * Operation timeouts without a Node timer per operation (issue #18: p2p's per-message cost).
 *
 * Every point-to-point send and receive is bounded by a timeout, nearly always the same one (the RPC
 * timeout), and nearly always finishes long before it. A setTimeout plus clearTimeout per operation
 * costs a Timeout object, a timer-list insertion and a removal each time; here operations with the
 * same duration share one lane:
 *
 * 1. A lane keeps its deadlines in the order they were set, which for one duration is due order, and
 *    one Node timer armed for the oldest live one.
 * 2. cancel() only marks the entry; cancelled entries at the lane's head are dropped at once (operations
 *    mostly finish in the order they started), others when the timer next fires or when they make up
 *    most of the lane (compaction), so a lane's memory stays bounded by its live deadlines.
 * 3. The timer fires each due deadline (performance.now() >= due, a monotonic clock) in order, then re-arms for the next live one.
 *    Delays past setTimeout's range are waited in steps, as LongTimer does.
 * 4. The lane's timer keeps the process alive only while the lane has a live deadline (ref/unref), as
 *    one timer per operation did.
 */
import { MAX_TIMER_MS } from "../rpc/timeouts.js";

/** A deadline set by `deadline`: cancel it once the operation finished. */
export interface Deadline {
  cancel(): void;
}

class Entry implements Deadline {
  constructor(
    readonly lane: Lane,
    readonly due: number,
    public onFire: (() => void) | null,
  ) {}

  cancel(): void {
    if (this.onFire === null) return;
    this.onFire = null;
    this.lane.dropped();
  }
}

/** Compact a lane once this many cancelled entries sit behind a live head, and they are most of it. */
const COMPACT_MIN = 64;

class Lane {
  private entries: Entry[] = [];
  private head = 0;
  private live = 0;
  private timer: NodeJS.Timeout | null = null;
  /** When the armed timer fires (performance.now() ms). */
  private armedFor = 0;

  constructor(
    private readonly ms: number,
    private readonly lanes: Map<number, Lane>,
  ) {}

  add(onFire: () => void): Deadline {
    const e = new Entry(this, performance.now() + this.ms, onFire);
    this.entries.push(e);
    this.live++;
    if (this.timer === null) this.arm(e.due);
    else if (this.live === 1) this.timer.ref();
    return e;
  }

  /** Number of deadlines not yet fired nor cancelled (tests). */
  get pending(): number {
    return this.live;
  }

  /** Entries kept, cancelled ones not yet dropped included (tests). */
  get kept(): number {
    return this.entries.length - this.head;
  }

  /** An entry was cancelled. */
  dropped(): void {
    this.live--;
    if (this.live === 0) {
      this.entries.length = 0;
      this.head = 0;
      this.timer?.unref();
      return;
    }
    this.trimHead();
    const kept = this.entries.length - this.head;
    if (kept - this.live >= COMPACT_MIN && kept > 2 * this.live) {
      this.entries = this.entries.slice(this.head).filter((x) => x.onFire !== null);
      this.head = 0;
    }
  }

  private trimHead(): void {
    const es = this.entries;
    while (this.head < es.length && es[this.head]!.onFire === null) this.head++;
    if (this.head >= 1024 && this.head * 2 >= es.length) {
      this.entries = es.slice(this.head);
      this.head = 0;
    }
  }

  private arm(due: number): void {
    this.armedFor = due;
    this.timer = setTimeout(this.fire, Math.min(Math.max(Math.ceil(due - performance.now()), 1), MAX_TIMER_MS));
    if (this.live === 0) this.timer.unref();
  }

  private readonly fire = (): void => {
    this.timer = null;
    const now = performance.now();
    this.trimHead();
    while (this.head < this.entries.length) {
      const e = this.entries[this.head]!;
      if (e.onFire === null) {
        this.head++;
        continue;
      }
      if (e.due > now) break;
      this.head++;
      const f = e.onFire;
      e.onFire = null;
      this.live--;
      f();
    }
    this.trimHead();
    if (this.live === 0) {
      this.entries.length = 0;
      this.head = 0;
      // NB: an empty lane goes away; the next deadline of this duration makes a new one
      if (this.lanes.get(this.ms) === this) this.lanes.delete(this.ms);
      return;
    }
    if (this.timer === null) this.arm(this.entries[this.head]!.due);
  };

  /** For tests: when the timer is armed for, or null. */
  get armedAt(): number | null {
    return this.timer === null ? null : this.armedFor;
  }
}

const lanes = new Map<number, Lane>();

/**
 * Calls `onFire` once `ms` (> 0, finite) milliseconds have passed, unless cancelled first. Cheaper than
 * a timer per call when many deadlines of the same duration are set and cancelled (see the file comment).
 */
export function deadline(ms: number, onFire: () => void): Deadline {
  let lane = lanes.get(ms);
  if (!lane) {
    lane = new Lane(ms, lanes);
    lanes.set(ms, lane);
  }
  return lane.add(onFire);
}

/** Live deadlines and kept entries of the lane of `ms` (tests). */
export function laneStats(ms: number): { pending: number; kept: number; armedAt: number | null } | null {
  const l = lanes.get(ms);
  return l ? { pending: l.pending, kept: l.kept, armedAt: l.armedAt } : null;
}
