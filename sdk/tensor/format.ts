/**
 * PyTorch-like printing: `tensor([[ 1.0000, -2.5000], ...], dtype=float64,
 * requiresGrad=true)`. Floats share one format per tensor (fixed with 4
 * decimals, integral floats as `1.`, scientific when the range is wide);
 * tensors over 1000 elements are summarised with 3 edge items per dim.
 */
import type { Tensor } from "./tensor.js";
import { getDefaultDType, isFloating } from "./dtype.js";
import { offsets, readerOf } from "./access.js";

const THRESHOLD = 1000;
const EDGE = 3;

function floatFormatter(values: number[]): (v: number) => string {
  const finite = values.filter((v) => Number.isFinite(v));
  const abs = finite.map(Math.abs).filter((v) => v !== 0);
  const allInt = finite.every((v) => Number.isInteger(v));
  const mx = abs.length ? Math.max(...abs) : 0;
  const mn = abs.length ? Math.min(...abs) : 0;
  const special = (v: number) => (Number.isNaN(v) ? "nan" : v > 0 ? "inf" : "-inf");
  if (allInt && mx < 1e8) return (v) => (Number.isFinite(v) ? `${v}.` : special(v));
  if (mx / Math.max(mn, Number.MIN_VALUE) > 1000 || mx > 1e8 || mn < 1e-4)
    return (v) => (Number.isFinite(v) ? v.toExponential(4).replace(/e([+-])(\d)$/, "e$10$2") : special(v));
  return (v) => (Number.isFinite(v) ? v.toFixed(4) : special(v));
}

/** Formats `t`; `host` holds its values when `t` is on another device (a CPU copy of the same shape). */
export function formatTensor(t: Tensor, host: Tensor = t): string {
  const read = readerOf(host.storage);
  const offs = offsets(host.shape, host.strides, host.offset);
  const summarize = offs.length > THRESHOLD;
  const floating = isFloating(t.dtype);
  const isBool = t.dtype === "bool";
  const all = Array.from(offs, (o) => read(o));
  const fmt = isBool ? (v: number) => (v ? "True" : "False") : floating ? floatFormatter(all) : (v: number) => `${v}`;
  const width = Math.max(1, ...all.map((v) => fmt(v).length));
  const strides: number[] = [];
  let s = 1;
  for (let d = t.ndim - 1; d >= 0; d--) {
    strides[d] = s;
    s *= t.shape[d]!;
  }
  const indent = "tensor(".length;
  const render = (d: number, base: number): string => {
    if (d === t.ndim) return fmt(all[base]!).padStart(width);
    const n = t.shape[d]!;
    const idx: (number | null)[] = [];
    if (summarize && n > 2 * EDGE) {
      for (let i = 0; i < EDGE; i++) idx.push(i);
      idx.push(null);
      for (let i = n - EDGE; i < n; i++) idx.push(i);
    } else for (let i = 0; i < n; i++) idx.push(i);
    const parts = idx.map((i) => (i === null ? "..." : render(d + 1, base + i * strides[d]!)));
    if (d === t.ndim - 1) return `[${parts.join(", ")}]`;
    const sep = `,${"\n".repeat(t.ndim - d - 1)}${" ".repeat(indent + d + 1)}`;
    return `[${parts.join(sep)}]`;
  };
  const body = t.numel() === 0 && t.ndim > 0 ? "[]" : render(0, 0);
  const extras: string[] = [];
  if (t.numel() === 0 && t.ndim > 1) extras.push(`size=[${t.shape.join(", ")}]`);
  const defaultDType = floating ? getDefaultDType() : t.dtype === "int64" || isBool ? t.dtype : "";
  if (t.dtype !== defaultDType) extras.push(`dtype=${t.dtype}`);
  if (t.device.type !== "cpu") extras.push(`device='${t.device}'`);
  if (t.gradFn) extras.push(`gradFn=<${t.gradFn.name}>`);
  else if (t.requiresGrad) extras.push("requiresGrad=true");
  return `tensor(${body}${extras.length ? `, ${extras.join(", ")}` : ""})`;
}
