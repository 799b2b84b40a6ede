/**
 * A tensor as a compact HTML table: a caption with shape, dtype, device and
 * grad state, then the values of its last dimension as columns and every
 * other index as a row label ("[0, 2]"). Big tensors show their first and last
 * EDGE rows and columns around a "⋯" row and column, as PyTorch's printing does.
 */
import type { Tensor } from "../tensor/tensor.js";
import { escapeHtml, type MimeBundle } from "./sink.js";

const EDGE = 4;
/** Above this many elements the values are read one by one instead of all at once. */
const FULL_READ = 65_536;

function fmt(v: number, dtype: string): string {
  if (dtype === "bool") return v ? "true" : "false";
  if (dtype.startsWith("int") || dtype === "uint8") return String(v);
  if (Number.isInteger(v) && Math.abs(v) < 1e6) return v.toFixed(1);
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-3 || a >= 1e6) ? v.toExponential(3) : v.toPrecision(4).replace(/\.?0+$/, "");
}

/** Indices kept along a dimension of size n: all, or the first and last EDGE with -1 for the gap. */
function kept(n: number): number[] {
  if (n <= 2 * EDGE + 1) return Array.from({ length: n }, (_, i) => i);
  return [...Array.from({ length: EDGE }, (_, i) => i), -1, ...Array.from({ length: EDGE }, (_, i) => n - EDGE + i)];
}

/** The caption line, also the first line of text/plain. */
export function tensorCaption(t: Tensor): string {
  const grad = t.requiresGrad ? ", requiresGrad" : "";
  return `Tensor [${t.shape.join(", ")}] ${t.dtype} ${t.device.toString()}${grad}`;
}

/** text/plain (the tensor's own printing) and text/html (the table). */
export function tensorBundle(t: Tensor): MimeBundle {
  return { "text/plain": t.toString(), "text/html": tensorHtml(t) };
}

export function tensorHtml(t: Tensor): string {
  const shape = t.shape;
  const cols = shape.length === 0 ? 1 : shape[shape.length - 1]!;
  const lead = shape.slice(0, -1);
  const rows = lead.reduce((a, b) => a * b, 1);
  const numel = t.numel();
  // NB: toArray() copies every element; for big tensors read just the shown ones from the row-major list.
  const flat = numel <= FULL_READ ? t.toArray() : null;
  const at = (r: number, c: number): number => {
    const i = r * cols + c;
    if (flat) return flat[i]!;
    return indexValue(t, i);
  };
  const rowIdx = shape.length <= 1 ? [0] : kept(rows);
  const colIdx = kept(cols);
  const label = (r: number): string => {
    const idx: number[] = [];
    for (let d = lead.length - 1, rest = r; d >= 0; d--) {
      idx.unshift(rest % lead[d]!);
      rest = Math.floor(rest / lead[d]!);
    }
    return `[${idx.join(", ")}]`;
  };
  const style = 'style="font-family:monospace;font-size:12px;border-collapse:collapse;text-align:right"';
  const th = (s: string) => `<th style="padding:1px 6px;color:#666">${s}</th>`;
  const td = (s: string) => `<td style="padding:1px 6px">${s}</td>`;
  const out: string[] = [
    `<table ${style}><caption style="text-align:left;white-space:nowrap">${escapeHtml(tensorCaption(t))}</caption>`,
  ];
  if (numel === 0) return out.join("") + "<tr><td>(empty)</td></tr></table>";
  if (shape.length >= 1)
    out.push(`<tr>${shape.length > 1 ? th("") : ""}${colIdx.map((c) => th(c < 0 ? "⋯" : String(c))).join("")}</tr>`);
  for (const r of rowIdx) {
    const cells =
      r < 0 ? colIdx.map(() => td("⋮")) : colIdx.map((c) => td(c < 0 ? "⋯" : escapeHtml(fmt(at(r, c), t.dtype))));
    out.push(`<tr>${shape.length > 1 ? th(r < 0 ? "⋮" : label(r)) : ""}${cells.join("")}</tr>`);
  }
  out.push("</table>");
  return out.join("");
}

/** The i-th element in row-major order, read without copying the whole tensor. */
function indexValue(t: Tensor, i: number): number {
  let off = 0;
  for (let d = t.shape.length - 1; d >= 0; d--) {
    const n = t.shape[d]!;
    off += (i % n) * t.strides[d]!;
    i = Math.floor(i / n);
  }
  // NB: a one-element view of the element (no copy) whose toArray() reads it from host memory.
  const TensorCtor = t.constructor as new (s: Tensor["storage"], sh: number[], st: number[], o: number) => Tensor;
  return new TensorCtor(t.storage, [], [], t.offset + off).toArray()[0]!;
}
