/**
 * Loads the PyTorch reference fixtures (test/fixtures/*.json, written by
 * scripts/gen_fixtures.py) and turns their encoded tensors into tprpc tensors;
 * compares tprpc results with the recorded ones to float32 tolerance.
 *
 * Encoding (see the generator's header): a tensor is {shape, dtype, data,
 * view?, requiresGrad?}; `data` is row-major, non-finite floats are the
 * strings "inf", "-inf", "nan"; `view` lists views applied to the contiguous
 * base built from `data`, and gradients are recorded for that base.
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { expect } from "vitest";
import { backend, type Tensor, tensor, zeros } from "../../sdk/index.js";

export type Scalar = number | string;
export interface EncodedView {
  op: "transpose" | "permute" | "expand" | "narrow";
  args: (number | number[])[];
}
export interface EncodedTensor {
  shape: number[];
  dtype: string;
  data: (number | boolean | string)[];
  view?: EncodedView[];
  requiresGrad?: boolean;
}
/** A fixture argument: a tensor, a tensor list, a non-finite number, or plain JSON. */
export type EncodedArg = EncodedTensor | { float: string } | EncodedArg[] | number | boolean | string | null;

export interface FixtureFile<C> {
  format: number;
  torch: string;
  cases: C[];
}

export function loadFixture<C>(file: string): FixtureFile<C> {
  const path = fileURLToPath(new URL(`../fixtures/${file}`, import.meta.url));
  const parsed = JSON.parse(readFileSync(path, "utf8")) as FixtureFile<C>;
  if (parsed.format !== 1)
    throw new Error(`${file}: unknown fixture format ${parsed.format}; regenerate with scripts/gen_fixtures.py`);
  return parsed;
}

export function isEncodedTensor(a: unknown): a is EncodedTensor {
  return typeof a === "object" && a !== null && !Array.isArray(a) && "shape" in a && "data" in a;
}

function decodeNumber(v: number | boolean | string): number {
  if (typeof v === "number") return v;
  if (typeof v === "boolean") return v ? 1 : 0;
  if (v === "inf") return Number.POSITIVE_INFINITY;
  if (v === "-inf") return Number.NEGATIVE_INFINITY;
  if (v === "nan") return Number.NaN;
  throw new Error(`bad fixture number ${JSON.stringify(v)}`);
}

/** The values in row-major order as numbers (bools as 0/1). */
export function expectedValues(e: EncodedTensor): number[] {
  return e.data.map(decodeNumber);
}

type Nested = number | boolean | Nested[];

function nest(flat: (number | boolean)[], shape: number[]): Nested {
  if (shape.length === 0) return flat[0]!;
  let k = 0;
  const build = (d: number): Nested[] => {
    const out: Nested[] = [];
    for (let i = 0; i < shape[d]!; i++) out.push(d === shape.length - 1 ? flat[k++]! : build(d + 1));
    return out;
  };
  return build(0);
}

// ---- the device under test ---------------------------------------------------------------------

let device: string | undefined;

/**
 * Runs the cases on `d` ("cuda:0" on the emulated CUDA device, test/cuda/parity_emulated.test.ts):
 * every decoded tensor is built there, and every compared result must be there; undefined: the CPU.
 */
export function useDevice(d: string | undefined): void {
  device = d;
}

export function testDevice(): string | undefined {
  return device;
}

/** The contiguous base tensor from the encoded data (a leaf, requiring grad if the fixture says so). */
export function decodeBase(e: EncodedTensor, requiresGrad = e.requiresGrad === true): Tensor {
  const flat = e.dtype === "bool" ? e.data.map((v) => v === true || v === 1) : e.data.map(decodeNumber);
  const opts = { dtype: e.dtype, requiresGrad, device } as Parameters<typeof tensor>[1];
  return tensor(nest(flat, e.shape) as Parameters<typeof tensor>[0], opts);
}

export function applyViews(t: Tensor, views: EncodedView[] | undefined): Tensor {
  for (const v of views ?? []) {
    const a = v.args as number[];
    switch (v.op) {
      case "transpose":
        t = t.transpose(a[0]!, a[1]!);
        break;
      case "permute":
        t = t.permute(a);
        break;
      case "expand":
        t = t.expand(a);
        break;
      case "narrow":
        t = t.narrow(a[0]!, a[1]!, a[2]!);
        break;
      default:
        throw new Error(`unknown fixture view op ${JSON.stringify(v.op)}`);
    }
  }
  return t;
}

/** A decoded argument: tensors become (views of) tprpc tensors, their bases collected in order. */
export type Arg = Tensor | Arg[] | number | boolean | string | null;

export function decodeArg(a: EncodedArg, bases: Tensor[]): Arg {
  if (isEncodedTensor(a)) {
    const base = decodeBase(a);
    bases.push(base);
    return applyViews(base, a.view);
  }
  if (Array.isArray(a)) return a.map((x) => decodeArg(x, bases));
  if (typeof a === "object" && a !== null && "float" in a) return decodeNumber(a.float);
  return a;
}

/** A tensor built from an encoded one, views applied (for upstream gradients, targets, weights). */
export function decodeTensor(e: EncodedTensor, requiresGrad = false): Tensor {
  return applyViews(decodeBase(e, requiresGrad), e.view);
}

// ---- comparison ------------------------------------------------------------------------------

export interface Tolerance {
  rtol: number;
  atol: number;
}
/** NB: scripts/gen_fixtures.py stops unless torch's own float32 results meet this (its FLOAT32_TOL). */
export const FLOAT32: Tolerance = { rtol: 1e-4, atol: 1e-5 };

function fmt(v: number): string {
  return Number.isFinite(v) ? v.toPrecision(8) : String(v);
}

/**
 * Asserts `got` matches the fixture tensor: same shape, same dtype, values
 * within |got - want| <= atol + rtol * |want| (exact for integer and bool
 * dtypes; NaN matches NaN, infinities must match exactly).
 */
export function expectClose(got: Tensor | null | undefined, want: EncodedTensor, what: string, tol = FLOAT32): void {
  if (got === null || got === undefined) throw new Error(`${what}: got ${got}, want a tensor of shape [${want.shape}]`);
  expect([...got.shape], `${what}: shape`).toEqual(want.shape);
  expect(got.device.toString(), `${what}: device`).toBe(device ?? "cpu");
  expect(got.dtype, `${what}: dtype`).toBe(want.dtype);
  const g = got.toArray().map(Number);
  const w = expectedValues(want);
  const exact = want.dtype !== "float32" && want.dtype !== "float64";
  const bad: string[] = [];
  let worst = 0;
  for (let i = 0; i < w.length; i++) {
    const a = g[i]!;
    const b = w[i]!;
    let ok: boolean;
    if (Number.isNaN(b)) ok = Number.isNaN(a);
    else if (!Number.isFinite(b) || exact) ok = a === b;
    else ok = Math.abs(a - b) <= tol.atol + tol.rtol * Math.abs(b);
    if (!ok) {
      worst = Math.max(worst, Number.isFinite(a - b) ? Math.abs(a - b) : Number.POSITIVE_INFINITY);
      if (bad.length < 6) bad.push(`[${i}] want ${fmt(b)} got ${fmt(a)}`);
    }
  }
  if (bad.length > 0)
    throw new Error(
      `${what}: ${bad.length === 6 ? "6+" : bad.length} of ${w.length} values differ (max |diff| ${fmt(worst)}, ` +
        `rtol ${tol.rtol}, atol ${tol.atol}): ${bad.join(", ")}`,
    );
}

/** The gradient a leaf received, treating "no gradient" as zeros (as the generator records it). */
export function gradOrZeros(leaf: Tensor): Tensor {
  if (leaf.grad) return leaf.grad;
  return zeros([...leaf.shape], { dtype: leaf.dtype, device: leaf.device });
}

// ---- backends --------------------------------------------------------------------------------

/** Every registered backend name; the suites run once per backend. */
export function backends(): string[] {
  return backend.listBackends();
}

export function useBackend(name: string): void {
  backend.setBackend(name);
}
