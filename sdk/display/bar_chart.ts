/**
 * Bar charts as SVG — one group of bars per category, one bar per series in each group, with a title,
 * axis labels, a legend and the value above each bar — drawn with d3-scale, like the line charts.
 *
 *   display.bars(["tcp", "shm"], { "via host buffer": [2.1, 1.4], direct: [1.9, 0.8] },
 *                { title: "time per step", xLabel: "channel", yLabel: "ms" });
 */
import { scaleBand, scaleLinear } from "d3-scale";
import { ValueError } from "../errors/index.js";
import { COLORS, tickText } from "./chart.js";
import { display, escapeHtml, type MimeBundle } from "./sink.js";

export interface BarChartOptions {
  title?: string;
  xLabel?: string;
  yLabel?: string;
  /** Pixels (default 640 × 320). */
  width?: number;
  height?: number;
  /** Text after each bar's value label (e.g. " ms"); values are shown unless `valueLabels` is false. */
  unit?: string;
  valueLabels?: boolean;
}

function check(categories: readonly string[], series: Readonly<Record<string, readonly number[]>>): void {
  for (const [name, values] of Object.entries(series)) {
    if (values.length !== categories.length)
      throw new ValueError(`bar series "${name}" has ${values.length} values for ${categories.length} categories`);
    if (!values.every(Number.isFinite)) throw new ValueError(`bar series "${name}" has a value that is not finite`);
  }
}

/** The bar chart as an SVG document (a string). */
export function barChartSvg(
  categories: readonly string[],
  series: Readonly<Record<string, readonly number[]>>,
  o: BarChartOptions = {},
): string {
  check(categories, series);
  const W = o.width ?? 640;
  const H = o.height ?? 320;
  const names = Object.keys(series);
  const legendTop = o.title ? 28 : 8;
  const m = { top: legendTop + 22, right: 16, bottom: o.xLabel ? 42 : 28, left: o.yLabel ? 62 : 48 };
  const values = names.flatMap((n) => series[n]!);
  const lo = Math.min(0, ...values);
  // NB: headroom above the tallest bar for its value label
  const hi = Math.max(0, ...values) * (o.valueLabels === false ? 1 : 1.08);
  const y = scaleLinear()
    .domain([lo, hi === lo ? lo + 1 : hi])
    .range([H - m.bottom, m.top])
    .nice();
  const x = scaleBand<string>()
    .domain(categories.map((c, i) => `${i}`))
    .range([m.left, W - m.right])
    .paddingInner(0.25)
    .paddingOuter(0.15);
  const inner = scaleBand<string>().domain(names).range([0, x.bandwidth()]).paddingInner(0.08);
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="11">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
  ];
  if (o.title)
    out.push(
      `<text x="${W / 2}" y="17" text-anchor="middle" font-size="13" font-weight="bold">${escapeHtml(o.title)}</text>`,
    );
  for (const t of y.ticks(6)) {
    const py = y(t).toFixed(1);
    out.push(`<line x1="${m.left}" x2="${W - m.right}" y1="${py}" y2="${py}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${m.left - 5}" y="${py}" dy="0.32em" text-anchor="end" fill="#444">${tickText(t)}</text>`);
  }
  const y0 = y(0);
  names.forEach((n, s) => {
    const color = COLORS[s % COLORS.length]!;
    series[n]!.forEach((v, c) => {
      const bx = x(`${c}`)! + inner(n)!;
      const top = Math.min(y(v), y0);
      const h = Math.abs(y(v) - y0);
      out.push(
        `<rect x="${bx.toFixed(1)}" y="${top.toFixed(1)}" width="${inner.bandwidth().toFixed(1)}" height="${h.toFixed(1)}" fill="${color}"/>`,
      );
      if (o.valueLabels !== false)
        out.push(
          `<text x="${(bx + inner.bandwidth() / 2).toFixed(1)}" y="${(v >= 0 ? top - 3 : top + h + 11).toFixed(1)}" text-anchor="middle" font-size="10" fill="#222">${escapeHtml(tickText(v) + (o.unit ?? ""))}</text>`,
        );
    });
  });
  categories.forEach((c, i) => {
    const px = (x(`${i}`)! + x.bandwidth() / 2).toFixed(1);
    out.push(`<text x="${px}" y="${H - m.bottom + 15}" text-anchor="middle" fill="#444">${escapeHtml(c)}</text>`);
  });
  out.push(
    `<line x1="${m.left}" x2="${W - m.right}" y1="${y0.toFixed(1)}" y2="${y0.toFixed(1)}" stroke="#444"/>`,
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
  // The legend: one row under the title, from the left edge of the plot (about 6.5 px per character).
  let lx = m.left;
  names.forEach((n, s) => {
    const ly = legendTop + 8;
    out.push(
      `<rect x="${lx}" y="${ly - 5}" width="10" height="10" fill="${COLORS[s % COLORS.length]}"/>`,
      `<text x="${lx + 14}" y="${ly}" dy="0.32em">${escapeHtml(n)}</text>`,
    );
    lx += 14 + Math.ceil(n.length * 6.5) + 18;
  });
  out.push("</svg>");
  return out.join("");
}

/** The bar chart's MIME bundle: image/svg+xml with a text/plain table of the values. */
export function barChartBundle(
  categories: readonly string[],
  series: Readonly<Record<string, readonly number[]>>,
  o: BarChartOptions = {},
): MimeBundle {
  const names = Object.keys(series);
  const text = [
    o.title ? `[bar chart] ${o.title}` : "[bar chart]",
    ...categories.map(
      (c, i) => `${c}: ${names.map((n) => `${n} ${tickText(series[n]![i]!)}${o.unit ?? ""}`).join(", ")}`,
    ),
  ].join("\n");
  return { "image/svg+xml": barChartSvg(categories, series, o), "text/plain": text };
}

/** Shows a bar chart: a group of bars per category, a bar per series (one legend entry per key). */
export function bars(
  categories: readonly string[],
  series: Readonly<Record<string, readonly number[]>>,
  o: BarChartOptions = {},
): void {
  display(barChartBundle(categories, series, o), { raw: true });
}
