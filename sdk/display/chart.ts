/**
 * Line charts as SVG — loss and reward curves — drawn with d3-scale (axes,
 * nice ticks) and d3-shape (the paths), with no DOM: the SVG is a string, so
 * it renders in any Jupyter front end and in the executed .ipynb files.
 *
 *   display.plot({ loss: losses }, { title: "training loss", xLabel: "step" });
 *
 *   const chart = display.chart({ title: "reward", yLabel: "mean reward" });
 *   for (let ep = 0; ep < 100; ep++) chart.push("reward", r);   // redrawn in place, throttled
 *   chart.done();                                                // the final drawing
 */
import { scaleLinear, scaleLog } from "d3-scale";
import { line } from "d3-shape";
import { ValueError } from "../errors/index.js";
import { display, emit, escapeHtml, MIME_BUNDLE, newDisplayId, type MimeBundle } from "./sink.js";

/** One curve: y values (x = 0, 1, 2, …) or explicit points. */
export type SeriesData = readonly number[] | { readonly x: readonly number[]; readonly y: readonly number[] };

export interface ChartOptions {
  title?: string;
  xLabel?: string;
  yLabel?: string;
  /** Pixels (default 640 × 320). */
  width?: number;
  height?: number;
  /** A logarithmic y axis (only positive values are drawn). */
  logY?: boolean;
  /** Also draw a moving average over this many points for each series (0 = off). */
  smooth?: number;
}

// d3's category10 palette.
export const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];

function points(s: SeriesData): Array<[number, number]> {
  if (Array.isArray(s)) return (s as number[]).map((y, i) => [i, y]);
  const { x, y } = s as { x: readonly number[]; y: readonly number[] };
  if (x.length !== y.length) throw new ValueError(`a series has ${x.length} x values but ${y.length} y values`);
  return x.map((xi, i) => [xi, y[i]!]);
}

function movingAverage(p: Array<[number, number]>, k: number): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  let sum = 0;
  for (let i = 0; i < p.length; i++) {
    sum += p[i]![1];
    if (i >= k) sum -= p[i - k]![1];
    out.push([p[i]![0], sum / Math.min(i + 1, k)]);
  }
  return out;
}

export function tickText(v: number): string {
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(1);
  return String(Number(v.toPrecision(4)));
}

/** A log axis gets a tick per leading digit of each decade: keep the powers of ten (or 1, 2, 5 over about one decade). */
function yTicks(ticks: number[], log: boolean): number[] {
  if (!log || ticks.length <= 8) return ticks;
  const lead = (t: number) => Math.round(t / 10 ** Math.floor(Math.log10(t) + 1e-9));
  const decades = ticks.filter((t) => lead(t) === 1);
  return decades.length >= 3 ? decades : ticks.filter((t) => [1, 2, 5].includes(lead(t)));
}

/** The chart as an SVG document (a string). */
export function lineChartSvg(series: Readonly<Record<string, SeriesData>>, o: ChartOptions = {}): string {
  const W = o.width ?? 640;
  const H = o.height ?? 320;
  const names = Object.keys(series);
  // NB: the legend gets a row of its own under the title, so that it never covers a curve.
  const legend = names.length > 1 || (names.length === 1 && !o.title);
  const legendTop = o.title ? 28 : 8;
  const m = {
    top: legend ? legendTop + 22 : o.title ? 28 : 12,
    right: 16,
    bottom: o.xLabel ? 42 : 28,
    left: o.yLabel ? 62 : 48,
  };
  const data = names.map((n) =>
    points(series[n]!).filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y) && (!o.logY || y > 0)),
  );
  const all = data.flat();
  const xs = all.map((p) => p[0]);
  const ys = all.map((p) => p[1]);
  const [x0, x1] = xs.length ? [Math.min(...xs), Math.max(...xs)] : [0, 1];
  let [y0, y1] = ys.length ? [Math.min(...ys), Math.max(...ys)] : [0, 1];
  if (y0 === y1) [y0, y1] = o.logY ? [y0 / 2, y1 * 2] : [y0 - 1, y1 + 1];
  const x = scaleLinear()
    .domain([x0, x1 === x0 ? x0 + 1 : x1])
    .range([m.left, W - m.right])
    .nice();
  const y = (o.logY ? scaleLog() : scaleLinear())
    .domain([y0, y1])
    .range([H - m.bottom, m.top])
    .nice();
  const path = line<[number, number]>()
    .x((p) => x(p[0]))
    .y((p) => y(p[1]));
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="11">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
  ];
  if (o.title)
    out.push(
      `<text x="${W / 2}" y="17" text-anchor="middle" font-size="13" font-weight="bold">${escapeHtml(o.title)}</text>`,
    );
  // Grid and ticks.
  for (const t of yTicks(y.ticks(6), !!o.logY)) {
    const py = y(t).toFixed(1);
    out.push(`<line x1="${m.left}" x2="${W - m.right}" y1="${py}" y2="${py}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${m.left - 5}" y="${py}" dy="0.32em" text-anchor="end" fill="#444">${tickText(t)}</text>`);
  }
  for (const t of x.ticks(8)) {
    const px = x(t).toFixed(1);
    out.push(`<line x1="${px}" x2="${px}" y1="${H - m.bottom}" y2="${H - m.bottom + 4}" stroke="#444"/>`);
    out.push(`<text x="${px}" y="${H - m.bottom + 15}" text-anchor="middle" fill="#444">${tickText(t)}</text>`);
  }
  out.push(
    `<line x1="${m.left}" x2="${W - m.right}" y1="${H - m.bottom}" y2="${H - m.bottom}" stroke="#444"/>`,
    `<line x1="${m.left}" x2="${m.left}" y1="${m.top}" y2="${H - m.bottom}" stroke="#444"/>`,
  );
  if (o.xLabel)
    out.push(
      `<text x="${(m.left + W - m.right) / 2}" y="${H - 6}" text-anchor="middle">${escapeHtml(o.xLabel)}</text>`,
    );
  if (o.yLabel)
    out.push(
      `<text transform="translate(14,${(m.top + H - m.bottom) / 2}) rotate(-90)" text-anchor="middle">${escapeHtml(o.yLabel)}</text>`,
    );
  // Curves (a lone point is drawn as a dot) and the legend.
  data.forEach((p, i) => {
    const color = COLORS[i % COLORS.length]!;
    const smooth = o.smooth && o.smooth > 1 && p.length > o.smooth;
    if (p.length === 1) out.push(`<circle cx="${x(p[0]![0])}" cy="${y(p[0]![1])}" r="2.5" fill="${color}"/>`);
    else if (p.length > 1)
      out.push(
        `<path d="${path(p)}" fill="none" stroke="${color}" stroke-width="${smooth ? 1 : 1.6}"${smooth ? ' stroke-opacity="0.35"' : ""}/>`,
      );
    if (smooth)
      out.push(`<path d="${path(movingAverage(p, o.smooth!))}" fill="none" stroke="${color}" stroke-width="2"/>`);
  });
  // The legend row, from the left edge of the plot (about 6.5 px per character).
  if (legend) {
    let lx = m.left;
    const ly = legendTop + 8;
    names.forEach((n, i) => {
      out.push(
        `<line x1="${lx}" x2="${lx + 16}" y1="${ly}" y2="${ly}" stroke="${COLORS[i % COLORS.length]}" stroke-width="2"/>`,
        `<text x="${lx + 20}" y="${ly}" dy="0.32em">${escapeHtml(n)}</text>`,
      );
      lx += 20 + Math.ceil(n.length * 6.5) + 18;
    });
  }
  out.push("</svg>");
  return out.join("");
}

/** A one-line text summary per series (the text/plain form of a chart). */
function summary(series: Readonly<Record<string, SeriesData>>, o: ChartOptions): string {
  const lines = Object.entries(series).map(([n, s]) => {
    const p = points(s);
    if (!p.length) return `${n}: (no points)`;
    const ys = p.map((q) => q[1]);
    return `${n}: ${p.length} points, first ${tickText(ys[0]!)}, last ${tickText(ys[ys.length - 1]!)}, min ${tickText(Math.min(...ys))}, max ${tickText(Math.max(...ys))}`;
  });
  return [o.title ? `[chart] ${o.title}` : "[chart]", ...lines].join("\n");
}

/** The chart's MIME bundle: image/svg+xml with a text/plain summary. */
export function lineChartBundle(series: Readonly<Record<string, SeriesData>>, o: ChartOptions = {}): MimeBundle {
  return { "image/svg+xml": lineChartSvg(series, o), "text/plain": summary(series, o) };
}

/** Shows a line chart of each series (one curve per key). */
export function plot(series: Readonly<Record<string, SeriesData>>, o: ChartOptions = {}): void {
  display(lineChartBundle(series, o), { raw: true });
}

/** A chart that grows while a loop runs, redrawn in place at most every `everyMs` (default 500). */
export class LiveChart {
  readonly displayId = newDisplayId("chart");
  private readonly xs = new Map<string, number[]>();
  private readonly ys = new Map<string, number[]>();
  private shown = false;
  private last = 0;

  constructor(readonly options: ChartOptions & { everyMs?: number } = {}) {}

  /** Appends a point to `name` (x defaults to that series' count so far) and redraws when due. */
  push(name: string, y: number, x?: number): void {
    if (!this.ys.has(name)) {
      this.xs.set(name, []);
      this.ys.set(name, []);
    }
    const ys = this.ys.get(name)!;
    this.xs.get(name)!.push(x ?? ys.length);
    ys.push(y);
    const now = Date.now();
    if (now - this.last >= (this.options.everyMs ?? 500)) this.draw();
  }

  /** The data so far, one series per name. */
  series(): Record<string, { x: number[]; y: number[] }> {
    const out: Record<string, { x: number[]; y: number[] }> = {};
    for (const [n, y] of this.ys) out[n] = { x: this.xs.get(n)!, y };
    return out;
  }

  /** Draws now (the first call adds the output, later ones replace it). */
  draw(): void {
    this.last = Date.now();
    emit(lineChartBundle(this.series(), this.options), { displayId: this.displayId, update: this.shown });
    this.shown = true;
  }

  /** The final drawing. */
  done(): void {
    this.draw();
  }

  [MIME_BUNDLE](): MimeBundle {
    return lineChartBundle(this.series(), this.options);
  }
}

/** A LiveChart: `chart.push(name, y)` in a loop, `chart.done()` at the end. */
export function chart(options: ChartOptions & { everyMs?: number } = {}): LiveChart {
  return new LiveChart(options);
}
