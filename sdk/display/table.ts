/**
 * Rows of records as a table (results per worker, per round, per run):
 *
 *   display.table([{ round: 1, loss: 0.42, acc: 0.81 }, { round: 2, loss: 0.31, acc: 0.86 }]);
 *
 * Columns are the union of the records' keys in first-seen order (or `columns`); numbers are
 * shown with 4 significant digits, tensors by their printing, anything else by String().
 */
import { Tensor } from "../tensor/tensor.js";
import { display, escapeHtml, type DisplayHandle, type MimeBundle } from "./sink.js";

export interface TableOptions {
  columns?: readonly string[];
  title?: string;
}

function cell(v: unknown): string {
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(4)));
  if (v instanceof Tensor) return v.numel() === 1 ? cell(v.item()) : v.toString();
  if (v === undefined || v === null) return "";
  return String(v);
}

/** The table's MIME bundle: text/html and an aligned text/plain. */
export function tableBundle(rows: readonly Readonly<Record<string, unknown>>[], o: TableOptions = {}): MimeBundle {
  const cols = o.columns ? [...o.columns] : [...new Set(rows.flatMap((r) => Object.keys(r)))];
  const text = rows.map((r) => cols.map((c) => cell(r[c])));
  const widths = cols.map((c, j) => Math.max(c.length, ...text.map((t) => t[j]!.length)));
  const line = (cells: string[]) => cells.map((s, j) => s.padStart(widths[j]!)).join("  ");
  const plain = [...(o.title ? [o.title] : []), line(cols), ...text.map(line)].join("\n");
  const th = (s: string) => `<th style="padding:1px 8px;text-align:right">${escapeHtml(s)}</th>`;
  const td = (s: string) => `<td style="padding:1px 8px;text-align:right">${escapeHtml(s)}</td>`;
  const caption = o.title ? `<caption style="text-align:left">${escapeHtml(o.title)}</caption>` : "";
  const html =
    `<table style="font-family:monospace;font-size:12px;border-collapse:collapse">${caption}` +
    `<tr>${cols.map(th).join("")}</tr>${text.map((t) => `<tr>${t.map(td).join("")}</tr>`).join("")}</table>`;
  return { "text/plain": plain, "text/html": html };
}

/** Shows the rows as a table; the handle's update() takes a new bundle (e.g. tableBundle(moreRows)). */
export function table(rows: readonly Readonly<Record<string, unknown>>[], o: TableOptions = {}): DisplayHandle {
  return display(tableBundle(rows, o), { raw: true });
}
