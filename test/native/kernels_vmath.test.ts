/**
 * Accuracy of the addon's float32 vector math (native/src/kernels/vmath_body.inc) on every ISA
 * this CPU runs (avx512, avx2, scalar): exp, log, tanh, sigmoid, erf and the GELU forms over wide
 * grids plus denormals, infinities, NaN and the overflow edges, against float64 math rounded to
 * float32. Errors are in float32 ulps at the reference value. TPRPC_DEBUG=1 prints the table.
 */
import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import type { NativeBinding } from "../../sdk/native/binding.js";
import { TsBackend } from "../../sdk/tensor/backend/ts/index.js";
import { erf, geluGrad, geluTanh, geluTanhGrad, sigmoid } from "../../sdk/tensor/backend/ts/math.js";
import { Tensor } from "../../sdk/tensor/tensor.js";
import { nativeOrSkip } from "./helpers.js";

const { native, skip } = nativeOrSkip();

/** erfc(x) for x >= 2.5 by the continued fraction of sdk/tensor/backend/ts/math.ts, without the 1 - erfc step. */
function erfcTail(x: number): number {
  let f = x;
  let c = x;
  let d = 0;
  for (let k = 1; k < 300; k++) {
    const a = k / 2;
    d = 1 / (x + a * d);
    c = x + a / c;
    const delta = c * d;
    f *= delta;
    if (Math.abs(delta - 1) < 1e-16) break;
  }
  return Math.exp(-x * x) / (f * Math.sqrt(Math.PI));
}

/** 1 + erf(z), accurate also when tiny. */
const onePlusErf = (z: number): number => (z < -2.5 ? erfcTail(-z) : 1 + erf(z));

const SQRT1_2 = Math.SQRT1_2;
const tanhArg = (x: number): number => 0.7978845608028654 * (x + 0.044715 * x * x * x);
const INV_SQRT_2PI = 0.3989422804014327;

interface Case {
  fn: (x: number) => number;
  lo: number;
  hi: number;
  /** ulps allowed */
  ulps: number;
  /** Size of the terms that cancel to fn(x) (ulps are taken at max(|fn(x)|, scale(x))): the grads have a root. */
  scale?: (x: number) => number;
}

const CASES: Record<string, Case> = {
  exp: { fn: Math.exp, lo: -104, hi: 89, ulps: 2 },
  log: { fn: Math.log, lo: 1e-45, hi: 3e38, ulps: 2 },
  tanh: { fn: Math.tanh, lo: -12, hi: 12, ulps: 3 },
  sigmoid: { fn: sigmoid, lo: -105, hi: 30, ulps: 3 },
  erf: { fn: erf, lo: -5, hi: 5, ulps: 3 },
  // NB: tails from erfc directly (the reference's 1 + erf cancels there); GELU to where it underflows.
  gelu: { fn: (x) => 0.5 * x * onePlusErf(x * SQRT1_2), lo: -13, hi: 10, ulps: 8 },
  geluGrad: {
    fn: (x) => (x < -3.6 ? 0.5 * onePlusErf(x * SQRT1_2) + x * INV_SQRT_2PI * Math.exp(-0.5 * x * x) : geluGrad(x)),
    lo: -5,
    hi: 10,
    ulps: 8,
    scale: (x) => 0.5 * onePlusErf(x * SQRT1_2) + Math.abs(x) * INV_SQRT_2PI * Math.exp(-0.5 * x * x),
  },
  // NB: as x * sigmoid(2u), which keeps the tail the reference's 1 + tanh(u) loses.
  geluTanh: { fn: (x) => (x < -3 ? x * sigmoid(2 * tanhArg(x)) : geluTanh(x)), lo: -10, hi: 10, ulps: 8 },
  geluTanhGrad: {
    fn: geluTanhGrad,
    lo: -4,
    hi: 10,
    ulps: 8,
    scale: (x) => {
      const t = Math.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
      return 0.5 * (1 + t) + Math.abs(0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x));
    },
  },
};

const SPECIAL = [
  0,
  -0,
  NaN,
  Infinity,
  -Infinity,
  1e-45,
  -1e-45,
  1e-40,
  -1e-40,
  1.1754942e-38,
  3.4028235e38,
  -3.4028235e38,
  88.72283,
  88.7229,
  89,
  -87.33,
  -103.97,
  -104,
  -110,
  1,
  -1,
  0.625,
  -0.625,
  0.5,
  0.7071,
  1.4142135,
  20,
  -20,
];

/** The spacing of float32 numbers at |v| (2^-149 for denormals). */
function ulp(v: number): number {
  const a = Math.abs(Math.fround(v));
  if (a < 1.1754943508222875e-38) return 2 ** -149;
  return 2 ** (Math.floor(Math.log2(a)) - 23);
}

/** Inputs: a uniform grid, a log grid for log, and the specials. */
function inputs(c: Case, name: string): Float32Array {
  const n = 200_000;
  const xs: number[] = [...SPECIAL];
  for (let i = 0; i < n; i++) {
    const t = i / (n - 1);
    xs.push(
      name === "log" ? Math.exp(Math.log(c.lo) + t * (Math.log(c.hi) - Math.log(c.lo))) : c.lo + t * (c.hi - c.lo),
    );
  }
  if (name === "log") for (let i = 0; i < 20_000; i++) xs.push(0.5 + (1.5 * i) / 20_000); // around 1
  return Float32Array.from(xs);
}

interface Report {
  maxUlp: number;
  at: number;
  maxRel: number;
}

function measure(n: NativeBinding, op: string, c: Case): Report {
  const x = inputs(c, op);
  const y = new Float32Array(x.length);
  n.unary(
    op,
    { data: x, offset: 0, shape: [x.length], strides: [1] },
    { data: y, offset: 0, shape: [y.length], strides: [1] },
  );
  let maxUlp = 0;
  let at = NaN;
  let maxRel = 0;
  for (let i = 0; i < x.length; i++) {
    const want = Math.fround(c.fn(x[i]!));
    const got = y[i]!;
    const bad = () => `${op}(${x[i]}) = ${got}, want ${want}`;
    if (Number.isNaN(want) || !Number.isFinite(want)) {
      if (!(Object.is(got, want) || (Number.isNaN(got) && Number.isNaN(want)))) expect.fail(bad());
      continue;
    }
    if (!Number.isFinite(got)) expect.fail(bad());
    const u = Math.abs(got - want) / ulp(c.scale ? Math.max(Math.abs(want), c.scale(x[i]!)) : want);
    if (u > maxUlp) {
      maxUlp = u;
      at = x[i]!;
    }
    if (Math.abs(want) >= 1.1754943508222875e-38) maxRel = Math.max(maxRel, Math.abs(got - want) / Math.abs(want));
  }
  return { maxUlp, at, maxRel };
}

describe.skipIf(skip !== null)("native float32 vector math accuracy", () => {
  const n = native as NativeBinding;
  const raw = (skip === null ? createRequire(import.meta.url)(n.path) : {}) as {
    simdIsa(): string;
    setSimdIsa(name: string): boolean;
  };

  for (const isa of ["avx512", "avx2", "scalar"]) {
    it(`${isa}: every function within its ulp bound, specials exact`, (ctx) => {
      const before = raw.simdIsa();
      if (!raw.setSimdIsa(isa)) ctx.skip(`this CPU lacks ${isa}`);
      try {
        const rows: string[] = [];
        for (const [op, c] of Object.entries(CASES)) {
          const r = measure(n, op, c);
          rows.push(
            `${isa.padEnd(7)} ${op.padEnd(13)} max ${r.maxUlp.toFixed(2)} ulp at ${r.at}, max rel ${r.maxRel.toExponential(2)}`,
          );
          expect(r.maxUlp, `${op}: ${rows[rows.length - 1]}`).toBeLessThanOrEqual(c.ulps);
          if (op === "exp") expect(r.maxRel).toBeLessThan(1e-6);
        }
        if (Number(process.env.TPRPC_DEBUG ?? 0) >= 1) console.info(rows.join("\n"));
      } finally {
        raw.setSimdIsa(before);
      }
    });
  }

  for (const isa of ["avx512", "avx2", "scalar"]) {
    it(`${isa}: binary ops, reductions and softmax agree with the reference (odd lengths: vector tails)`, (ctx) => {
      const before = raw.simdIsa();
      if (!raw.setSimdIsa(isa)) ctx.skip(`this CPU lacks ${isa}`);
      try {
        const ref = new TsBackend();
        const mk = (shape: number[], seed: number, strides?: number[]) => {
          const len = shape.reduce((p, d) => p * d, 1);
          const t = Tensor.empty(shape, "float32");
          const d = t.storage.data as Float32Array;
          for (let i = 0; i < len; i++) d[i] = Math.sin(seed * 7.1 + i * 1.3) * 5;
          d[3] = NaN;
          return strides ? new Tensor(t.storage, shape, strides, 0) : t;
        };
        const kv = (t: Tensor) => ({
          data: t.storage.data as Float32Array,
          offset: t.offset,
          shape: t.shape,
          strides: t.strides,
        });
        const eq = (got: Tensor, want: Tensor, tol: number) => {
          const g = got.storage.data as Float32Array;
          const w = want.storage.data as Float32Array;
          for (let i = 0; i < w.length; i++) {
            if (Number.isNaN(w[i]!) && Number.isNaN(g[i]!)) continue;
            if (!(Math.abs(g[i]! - w[i]!) <= tol * Math.max(1, Math.abs(w[i]!))))
              expect.fail(`element ${i}: ${g[i]} vs ${w[i]}`);
          }
        };
        const a = mk([5, 37], 1);
        const scalar = mk([5, 37], 2, [0, 0]);
        const row = mk([5, 37], 3, [0, 1]);
        for (const b of [mk([5, 37], 4), scalar, row]) {
          for (const op of ["add", "sub", "mul", "div", "maximum", "minimum"] as const) {
            for (const [x, y] of [
              [a, b],
              [b, a],
            ] as const) {
              const got = Tensor.empty([5, 37], "float32");
              const want = Tensor.empty([5, 37], "float32");
              n.binary(op, kv(x), kv(y), kv(got));
              ref.binary(op, x, y, want);
              eq(got, want, 0);
            }
          }
        }
        for (const op of ["sum", "max", "min"] as const) {
          const got = Tensor.empty([5, 1], "float32");
          const want = Tensor.empty([5, 1], "float32");
          n.reduce(op, kv(a), [1], kv(got));
          ref.reduce(op, a, [1], want);
          eq(got, want, 1e-6);
        }
        for (const log of [false, true]) {
          const x = mk([5, 37], 5);
          (x.storage.data as Float32Array)[3] = 1; // NB: a NaN would blank the whole row
          const got = Tensor.empty([5, 37], "float32");
          const want = Tensor.empty([5, 37], "float32");
          n.softmax(kv(x), 1, log, kv(got));
          ref.softmax(x, 1, log, want);
          eq(got, want, 4e-6);
        }
      } finally {
        raw.setSimdIsa(before);
      }
    });
  }

  for (const isa of ["avx512", "avx2", "scalar"]) {
    it(`${isa}: softmax rows of every length to 70 (one pass up to 4 vectors), -inf, underflow and NaN entries`, (ctx) => {
      const before = raw.simdIsa();
      if (!raw.setSimdIsa(isa)) ctx.skip(`this CPU lacks ${isa}`);
      try {
        const ref = new TsBackend();
        const kv = (t: Tensor) => ({
          data: t.storage.data as Float32Array,
          offset: t.offset,
          shape: t.shape,
          strides: t.strides,
        });
        for (let len = 1; len <= 70; len++) {
          // row 0 plain, row 1 with -inf entries and one 200 below the max (exp underflows: exactly 0),
          // row 2 all -inf, row 3 a NaN, row 4 one element far above the rest
          const rows = 5;
          const x = Tensor.empty([rows, len], "float32");
          const d = x.storage.data as Float32Array;
          for (let i = 0; i < rows * len; i++) d[i] = Math.sin(len * 3.7 + i * 1.3) * 6;
          for (let j = 0; j < len; j += 3) d[len + j] = -Infinity;
          if (len > 2) {
            d[len + 1] = 5;
            d[len + len - 1] = -195;
          }
          for (let j = 0; j < len; j++) d[2 * len + j] = -Infinity;
          d[3 * len + (len >> 1)] = NaN;
          d[4 * len + len - 1] = 120;
          for (const log of [false, true]) {
            const got = Tensor.empty([rows, len], "float32");
            const want = Tensor.empty([rows, len], "float32");
            (got.storage.data as Float32Array).fill(7); // every element must be written
            n.softmax(kv(x), 1, log, kv(got));
            ref.softmax(x, 1, log, want);
            const g = got.storage.data as Float32Array;
            const w = want.storage.data as Float32Array;
            for (let i = 0; i < w.length; i++) {
              if (Number.isNaN(w[i]!)) {
                expect(g[i], `len ${len} log ${log} element ${i}`).toBeNaN();
                continue;
              }
              if (!(g[i] === w[i] || Math.abs(g[i]! - w[i]!) <= 4e-6 * Math.max(1, Math.abs(w[i]!))))
                expect.fail(`len ${len} log ${log} element ${i}: ${g[i]} vs ${w[i]}`);
            }
            if (!log && len > 2) expect(g[len + len - 1]).toBe(0);
          }
        }
      } finally {
        raw.setSimdIsa(before);
      }
    });
  }
});
