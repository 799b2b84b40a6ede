/**
 * A progress display for long loops, updated in place: a bar, the count, the
 * elapsed time, the rate, the time left, and the latest metrics.
 *
 *   const bar = display.progress(1000, { label: "training" });
 *   for (let step = 0; step < 1000; step++) { …; bar.update(step + 1, { loss }); }
 *   bar.done();
 *
 * In a notebook the output is replaced in place (update_display_data), at most
 * every `everyMs` (default 200). Without a notebook it writes to stderr: with
 * "\r" on a terminal, else one line per tenth of the work.
 */
import { emit, escapeHtml, MIME_BUNDLE, hasDisplaySink, newDisplayId, type MimeBundle } from "./sink.js";

export interface ProgressOptions {
  label?: string;
  /** Minimum ms between redraws (default 200). */
  everyMs?: number;
}

function clock(s: number): string {
  if (!Number.isFinite(s)) return "?";
  s = Math.round(s);
  const h = Math.floor(s / 3600);
  const mm = String(Math.floor((s % 3600) / 60)).padStart(2, "0");
  const ss = String(s % 60).padStart(2, "0");
  return h ? `${h}:${mm}:${ss}` : `${mm}:${ss}`;
}

function metric(v: number | string): string {
  return typeof v === "number" ? String(Number(v.toPrecision(4))) : v;
}

export class Progress {
  readonly displayId = newDisplayId("progress");
  private n = 0;
  private metrics: Readonly<Record<string, number | string>> = {};
  private readonly started = Date.now();
  private lastDraw = 0;
  private shown = false;
  private finished = false;
  private endedAt: number | null = null;
  private lastTenth = -1;

  constructor(
    readonly total: number,
    readonly options: ProgressOptions = {},
  ) {}

  /** Sets the count (default: one more) and the metrics shown beside it; redraws when due. */
  update(n = this.n + 1, metrics?: Readonly<Record<string, number | string>>): void {
    this.n = n;
    if (metrics) this.metrics = metrics;
    if (Date.now() - this.lastDraw >= (this.options.everyMs ?? 200)) this.draw();
  }

  /** The final drawing (idempotent). */
  done(metrics?: Readonly<Record<string, number | string>>): void {
    if (this.finished) return;
    if (metrics) this.metrics = metrics;
    this.finished = true;
    this.endedAt = Date.now();
    this.draw();
  }

  /**
   * The status line, e.g. "training 37/100 [00:05<00:08, 7.1 it/s] loss=0.23"; once done, a finished
   * line without an estimate, which says when the work stopped early: "training done: 604 of 4000
   * (stopped early) [00:05, 7.1 it/s] reward=196".
   */
  text(): string {
    const secs = ((this.endedAt ?? Date.now()) - this.started) / 1000;
    const rate = secs > 0 ? this.n / secs : 0;
    const m = Object.entries(this.metrics)
      .map(([k, v]) => `${k}=${metric(v)}`)
      .join(" ");
    const label = this.options.label ? `${this.options.label} ` : "";
    const tail = m ? " " + m : "";
    if (this.finished) {
      const count = this.n < this.total ? `${this.n} of ${this.total} (stopped early)` : `${this.n}/${this.total}`;
      return `${label}done: ${count} [${clock(secs)}, ${rate.toFixed(1)} it/s]${tail}`;
    }
    const left = rate > 0 ? (this.total - this.n) / rate : Infinity;
    const pct = this.total > 0 ? Math.floor((100 * this.n) / this.total) : 100;
    return `${label}${this.n}/${this.total} ${pct}% [${clock(secs)}<${clock(left)}, ${rate.toFixed(1)} it/s]${tail}`;
  }

  [MIME_BUNDLE](): MimeBundle {
    // NB: a finished bar is full, also when the work stopped early (a solved task, early stopping).
    // NB: the value is a fraction of the default max (1): nbconvert 6.5's HTML export cleans outputs with
    // lxml, which keeps <progress value> but drops `max` and every style, so the exported bar shows the same state.
    const frac = this.finished ? 1 : this.total > 0 ? Math.min(Math.max(this.n / this.total, 0), 1) : 1;
    const t = escapeHtml(this.text());
    return {
      "text/plain": this.text(),
      "text/html": `<div style="font-family:monospace;font-size:12px"><progress value="${Number(frac.toFixed(4))}" style="width:240px;vertical-align:middle"></progress> ${t}</div>`,
    };
  }

  private draw(): void {
    this.lastDraw = Date.now();
    if (hasDisplaySink()) {
      emit(this[MIME_BUNDLE](), { displayId: this.displayId, update: this.shown });
      this.shown = true;
      return;
    }
    if (process.stderr.isTTY) {
      process.stderr.write(`\r${this.text()}${this.finished ? "\n" : ""}`);
      return;
    }
    const tenth = this.total > 0 ? Math.floor((10 * this.n) / this.total) : 10;
    if (tenth !== this.lastTenth || this.finished) {
      this.lastTenth = tenth;
      process.stderr.write(`${this.text()}\n`);
    }
  }
}

/** A Progress over `total` steps. */
export function progress(total: number, options: ProgressOptions = {}): Progress {
  return new Progress(total, options);
}
