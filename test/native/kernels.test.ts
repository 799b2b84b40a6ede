/**
 * The addon's CPU kernels (native/src/kernels) against the TypeScript reference backend: every
 * kernel on contiguous, transposed, sliced and broadcast (stride 0) views, float32 and float64,
 * NaN and infinity cases, integer dtypes where the kernels take them, and the typed errors.
 * Float32 results may differ from the reference (float64 math, then rounded) by a few ulp.
 */
import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import type { NativeBinding, NativeView } from "../../sdk/native/binding.js";
import type { DType } from "../../sdk/tensor/dtype.js";
import type { BinaryOp, UnaryOp } from "../../sdk/tensor/backend/interface.js";
import { TsBackend } from "../../sdk/tensor/backend/ts/index.js";
import { Tensor } from "../../sdk/tensor/tensor.js";
import { nativeOrSkip } from "./helpers.js";

const { native, skip } = nativeOrSkip();
const ref = new TsBackend();

// ---- helpers ---------------------------------------------------------------------------------

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const SPECIALS = [NaN, Infinity, -Infinity, 0, -0, 0.5, -0.5, 1.5, 2.5, -2.5, 1e-40, -3, 100, -100];

/** A contiguous tensor with uniform values in [lo, hi) (integers for int dtypes), specials first when asked. */
function rand(shape: number[], dtype: DType, seed: number, lo = -4, hi = 4, specials = false): Tensor {
  const t = Tensor.empty(shape, dtype);
  const r = rng(seed);
  const d = t.storage.data;
  for (let i = 0; i < d.length; i++) {
    let v = specials && i < SPECIALS.length ? SPECIALS[i]! : lo + (hi - lo) * r();
    if (dtype === "int64") (d as BigInt64Array)[i] = BigInt(Math.trunc(Number.isFinite(v) ? v : 0));
    else if (dtype === "int32" || dtype === "uint8" || dtype === "bool") {
      if (!Number.isFinite(v)) v = 0;
      (d as Int32Array)[i] = dtype === "bool" ? (v > 0 ? 1 : 0) : Math.trunc(v);
    } else (d as Float32Array)[i] = v;
  }
  return t;
}

const view = (t: Tensor): NativeView => ({
  data: t.storage.data as NativeView["data"],
  offset: t.offset,
  shape: t.shape,
  strides: t.strides,
});
const like = (t: Tensor, dtype: DType = t.dtype): Tensor => Tensor.empty(t.shape, dtype);
const strided = (t: Tensor, shape: number[], strides: number[], offset = t.offset): Tensor =>
  new Tensor(t.storage, shape, strides, offset);
/** [rows, cols] as the transpose of a contiguous [cols, rows]. */
const transposed = (rows: number, cols: number, dtype: DType, seed: number): Tensor =>
  strided(rand([cols, rows], dtype, seed), [rows, cols], [1, rows]);
/** Every other column of a contiguous [rows, 2 cols + 1], offset by one. */
const sliced = (rows: number, cols: number, dtype: DType, seed: number): Tensor =>
  strided(rand([rows, 2 * cols + 1], dtype, seed), [rows, cols], [2 * cols + 1, 2], 1);

function values(t: Tensor): number[] {
  const d = t.storage.data;
  const out: number[] = [];
  const n = t.shape.reduce((a, b) => a * b, 1);
  for (let i = 0; i < n; i++) out.push(Number(d[t.offset + i]!));
  return out;
}

/** Where two long value lists first differ ("none" when equal): vitest's toEqual walks a million elements slowly. */
function firstDifference(got: number[], want: number[]): string {
  if (got.length !== want.length) return `length ${got.length} vs ${want.length}`;
  for (let i = 0; i < got.length; i++) if (!Object.is(got[i], want[i])) return `at ${i}: ${got[i]} vs ${want[i]}`;
  return "none";
}

/** Largest error over the elements, relative to max(|ref|, floor); NaN must match NaN, infinities exactly. */
function maxErr(got: Tensor, want: Tensor, floor: number): number {
  const g = values(got);
  const w = values(want);
  expect(g.length).toBe(w.length);
  let worst = 0;
  for (let i = 0; i < g.length; i++) {
    const a = g[i]!;
    const b = w[i]!;
    if (Number.isNaN(b) || !Number.isFinite(b)) {
      if (!Object.is(a, b) && !(Number.isNaN(a) && Number.isNaN(b)))
        throw new Error(`element ${i}: got ${a}, want ${b}`);
      continue;
    }
    const e = Math.abs(a - b) / Math.max(Math.abs(b), floor);
    if (!(e <= worst)) worst = e; // NB: a NaN error sticks
  }
  return worst;
}

function close(got: Tensor, want: Tensor, tol = got.dtype === "float32" ? 3e-6 : 1e-13, floor = 1e-30): void {
  const e = maxErr(got, want, floor);
  expect(e, `max rel error ${e}`).toBeLessThanOrEqual(tol);
}

/** Exact equality (NaN equals NaN; -0 equals 0). */
function same(got: Tensor, want: Tensor): void {
  const norm = (v: number) => (v === 0 ? 0 : v);
  expect(values(got).map(norm)).toEqual(values(want).map(norm));
}

// ---- elementwise -----------------------------------------------------------------------------

const FLOAT_UNARY: UnaryOp[] = [
  "neg", "exp", "log", "sqrt", "rsqrt", "abs", "sign", "tanh", "sigmoid", "relu", "gelu", "geluTanh",
  "geluGrad", "geluTanhGrad", "erf", "sin", "cos", "reciprocal", "square", "log1p", "expm1", "floor",
  "ceil", "round",
]; // prettier-ignore

// NB: float32 ops whose vector kernel is our own polynomial get a few ulp; the rest are float64 math, rounded.
const F32_TOL: Partial<Record<UnaryOp, number>> = { gelu: 5e-6, geluGrad: 2e-5, geluTanh: 5e-6, geluTanhGrad: 2e-5 };

describe.skipIf(skip !== null)("native kernels: elementwise", () => {
  const n = native as NativeBinding;

  function unaryCase(op: UnaryOp, x: Tensor, args: number[] = [], outDType: DType = x.dtype): [Tensor, Tensor] {
    const got = like(x, outDType);
    const want = like(x, outDType);
    n.unary(op, view(x), view(got), args[0], args[1]);
    ref.unary(op, x, want, args);
    return [got, want];
  }

  for (const dtype of ["float32", "float64"] as const) {
    it(`unary ops match the reference (${dtype}, contiguous with specials, transposed, sliced, broadcast)`, () => {
      for (const op of FLOAT_UNARY) {
        // NB: for float64 GELU the reference's own erf and glibc's differ by ~1e-16 absolute, a few 1e-12 relative.
        const tol = dtype === "float32" ? (F32_TOL[op] ?? 3e-6) : op.startsWith("gelu") ? 1e-11 : 1e-13;
        // NB: the tails of the GELU forms are tiny; the reference itself loses them to cancellation.
        const floor = op.startsWith("gelu") ? 1e-6 : 1e-30;
        const inputs = [
          rand([3, 37], dtype, 1, -6, 6, true),
          transposed(9, 17, dtype, 2),
          sliced(5, 19, dtype, 3),
          strided(rand([7], dtype, 4), [6, 7], [0, 1]),
        ];
        for (const x of inputs) {
          const [got, want] = unaryCase(op, x);
          const e = maxErr(got, want, floor);
          expect(e, `${op} ${dtype} ${JSON.stringify(x.strides)}: max rel error ${e}`).toBeLessThanOrEqual(tol);
        }
      }
    });

    it(`clamp and powScalar take their arguments; NaN bounds clamp nothing (${dtype})`, () => {
      const x = rand([4, 25], dtype, 5, -3, 3, true);
      for (const args of [
        [-1, 1],
        [NaN, 0.5],
        [-0.25, NaN],
        [NaN, NaN],
      ])
        close(...unaryCase("clamp", x, args));
      const pos = rand([4, 25], dtype, 6, 0, 3, true);
      for (const e of [2, 0.5, 1, -1, 3, 1.7, -0.5, 0])
        close(...unaryCase("powScalar", pos, [e]), dtype === "float32" ? 3e-6 : 1e-14);
    });
  }

  it("round is half to even, relu and sign keep NaN, sign(0) = 0", () => {
    const x = Tensor.empty([10], "float32");
    (x.storage.data as Float32Array).set([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, NaN, 0, -0, 3.5]);
    const [r] = unaryCase("round", x);
    expect(values(r)).toEqual([0, 2, 2, -0, -2, -2, NaN, 0, -0, 4]);
    const [s] = unaryCase("sign", x);
    expect(values(s).slice(6, 9)).toEqual([NaN, 0, -0]);
    const [re] = unaryCase("relu", x);
    expect(values(re)[6]).toBeNaN();
    expect(values(re)[3]).toBe(0);
  });

  it("isnan and logicalNot write bool for every input dtype", () => {
    for (const dtype of ["float32", "float64", "int32", "int64", "uint8"] as const) {
      const x = rand([3, 11], dtype, 7, -2, 2, true);
      for (const op of ["isnan", "logicalNot"] as const) same(...unaryCase(op, x, [], "bool"));
    }
  });

  it("integer unary ops wrap like typed-array stores; float-only ops on ints throw a TypeError", () => {
    for (const dtype of ["int32", "int64", "uint8"] as const) {
      const x = rand([4, 9], dtype, 8, -50, 50);
      for (const op of ["neg", "abs", "sign", "square", "relu", "floor", "round"] as const) same(...unaryCase(op, x));
      same(...unaryCase("clamp", x, [-10, 20]));
      expect(() => n.unary("exp", view(x), view(like(x)))).toThrow(TypeError);
    }
    const x = rand([2], "float32", 9);
    expect(() => n.unary("nope", view(x), view(like(x)))).toThrow(TypeError);
    expect(() => n.unary("exp", view(x), view(like(x, "float64")))).toThrow(TypeError);
  });

  const ALL_BINARY: BinaryOp[] = [
    "add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logicalAnd", "logicalOr",
  ]; // prettier-ignore
  const COMPARE = new Set<BinaryOp>(["eq", "ne", "lt", "le", "gt", "ge", "logicalAnd", "logicalOr"]);

  function binaryCase(op: BinaryOp, a: Tensor, b: Tensor): [Tensor, Tensor] {
    const shape = a.shape as number[];
    const dt = COMPARE.has(op) ? "bool" : a.dtype;
    const got = Tensor.empty(shape, dt);
    const want = Tensor.empty(shape, dt);
    n.binary(op, view(a), view(b), view(got));
    ref.binary(op, a, b, want);
    return [got, want];
  }

  /** Pairs of [a, b] over shape [R, C]: contiguous, scalar b, scalar a, row and column broadcast, transposed, sliced. */
  function pairs(dtype: DType, R: number, C: number, lo = -3, hi = 3): [string, Tensor, Tensor][] {
    const full = (s: number) => rand([R, C], dtype, s, lo, hi, dtype.startsWith("float"));
    return [
      ["contiguous", full(10), full(11)],
      ["scalar b", full(12), strided(rand([1], dtype, 13, lo, hi), [R, C], [0, 0])],
      ["scalar a", strided(rand([1], dtype, 14, lo, hi), [R, C], [0, 0]), full(15)],
      ["row broadcast", full(16), strided(rand([C], dtype, 17, lo, hi), [R, C], [0, 1])],
      ["column broadcast", full(18), strided(rand([R], dtype, 19, lo, hi), [R, C], [1, 0])],
      ["transposed", transposed(R, C, dtype, 20), full(21)],
      ["sliced", sliced(R, C, dtype, 22), full(23)],
    ];
  }

  for (const dtype of ["float32", "float64"] as const) {
    it(`binary ops match the reference on every layout (${dtype})`, () => {
      for (const [layout, a, b] of pairs(dtype, 6, 35)) {
        for (const op of ALL_BINARY) {
          const [got, want] = binaryCase(op, a, b);
          const e = maxErr(got, want, 1e-30);
          expect(e, `${op} ${layout}`).toBeLessThanOrEqual(dtype === "float32" ? 0 : 1e-15);
        }
      }
    });
  }

  it("maximum and minimum propagate NaN from either side", () => {
    const a = Tensor.empty([4], "float32");
    const b = Tensor.empty([4], "float32");
    (a.storage.data as Float32Array).set([NaN, 1, NaN, 2]);
    (b.storage.data as Float32Array).set([1, NaN, NaN, 3]);
    for (const op of ["maximum", "minimum"] as const) {
      const [got] = binaryCase(op, a, b);
      expect(values(got).slice(0, 3).every(Number.isNaN)).toBe(true);
    }
  });

  it("integer binary ops: arithmetic, maximum/minimum and comparisons; logical ops on bool", () => {
    for (const dtype of ["int32", "int64"] as const) {
      for (const [, a, b] of pairs(dtype, 5, 13, -20, 20)) {
        for (const op of ["add", "sub", "mul", "maximum", "minimum", "eq", "lt", "ge", "ne"] as const)
          same(...binaryCase(op, a, b));
      }
    }
    for (const [, a, b] of pairs("uint8", 5, 13, -1, 2)) {
      for (const op of ["logicalAnd", "logicalOr", "eq", "ne", "maximum"] as const) same(...binaryCase(op, a, b));
    }
    const u = rand([3], "uint8", 1);
    expect(() => n.binary("pow", view(u), view(u), view(like(u)))).toThrow(TypeError);
    const f = rand([3], "float32", 1);
    expect(() => n.binary("add", view(f), view(rand([3], "float64", 1)), view(like(f)))).toThrow(TypeError);
  });

  it("large float32 runs (streaming stores, split across the pool) give the same bits as one thread", () => {
    const a = rand([300_001], "float32", 30);
    const b = rand([300_001], "float32", 31);
    const before = n.getNumThreads();
    // NB: outputs at an odd offset, so the streaming stores start after an unaligned head.
    const out = () => strided(Tensor.empty([300_004], "float32"), [300_001], [1], 3);
    const run = (threads: number) => {
      n.setNumThreads(threads);
      const o1 = out();
      const o2 = out();
      n.binary("add", view(a), view(b), view(o1));
      n.unary("gelu", view(a), view(o2));
      return [values(o1), values(o2)];
    };
    const one = run(1);
    const many = run(4);
    n.setNumThreads(before);
    expect(many).toEqual(one);
    const [got, want] = binaryCase("add", a, b);
    close(got, want, 0);
  });

  it("where selects with broadcast cond, a and b for every dtype", () => {
    for (const dtype of ["float32", "float64", "int32", "int64", "uint8"] as const) {
      const cond = strided(rand([9], "bool", 40, -1, 1), [5, 9], [0, 1]);
      const a = rand([5, 9], dtype, 41, -9, 9);
      const b = strided(rand([5], dtype, 42, -9, 9), [5, 9], [1, 0]);
      const got = like(a);
      const want = like(a);
      n.where(view(cond), view(a), view(b), view(got));
      ref.where(cond, a, b, want);
      same(got, want);
    }
  });

  it("where selects in each of its loops: both full, a or b one value, and strided", () => {
    for (const dtype of ["float32", "float64", "int64", "uint8"] as const) {
      const cond = rand([6, 7], "bool", 50, -1, 1);
      const full = (seed: number) => rand([6, 7], dtype, seed, -9, 9);
      const one = (seed: number) => strided(rand([1], dtype, seed, -9, 9), [6, 7], [0, 0]);
      const cases = [
        [full(51), full(52)],
        [full(53), one(54)],
        [one(55), full(56)],
        // a transposed view: no operand runs with unit stride
        [strided(rand([7, 6], dtype, 57, -9, 9), [6, 7], [1, 6]), full(58)],
      ];
      for (const [a, b] of cases) {
        const got = like(full(59));
        const want = like(got);
        n.where(view(cond), view(a!), view(b!), view(got));
        ref.where(cond, a!, b!, want);
        same(got, want);
      }
    }
  });
});

// ---- reductions ------------------------------------------------------------------------------

describe.skipIf(skip !== null)("native kernels: reductions", () => {
  const n = native as NativeBinding;

  function reduceCase(
    op: "sum" | "prod" | "max" | "min",
    x: Tensor,
    dims: number[],
    outDType?: DType,
  ): [Tensor, Tensor] {
    const kept = x.shape.map((d, i) => (dims.includes(i) ? 1 : d));
    const dt = outDType ?? x.dtype;
    const got = Tensor.empty(kept, dt);
    const want = Tensor.empty(kept, dt);
    n.reduce(op, view(x), dims, view(got));
    ref.reduce(op, x, dims, want);
    return [got, want];
  }

  const DIMS = [[2], [1], [0], [0, 2], [1, 2], [0, 1], [0, 1, 2], []];

  for (const dtype of ["float32", "float64"] as const) {
    it(`sum, prod, max and min over any dims and layouts (${dtype})`, () => {
      const base = rand([4, 5, 6], dtype, 50, 0.5, 1.5);
      const views = [
        base,
        strided(rand([6, 5, 4], dtype, 51, 0.5, 1.5), [4, 5, 6], [1, 4, 20]), // fully transposed
        strided(rand([4, 5, 13], dtype, 52, 0.5, 1.5), [4, 5, 6], [65, 13, 2], 1), // sliced
        strided(rand([5, 6], dtype, 53, 0.5, 1.5), [4, 5, 6], [0, 6, 1]), // broadcast
      ];
      for (const x of views)
        for (const dims of DIMS)
          for (const op of ["sum", "prod", "max", "min"] as const) {
            const [got, want] = reduceCase(op, x, dims);
            const e = maxErr(got, want, 1e-30);
            expect(e, `${op} dims ${dims} strides ${x.strides}`).toBeLessThanOrEqual(
              dtype === "float32" ? 1e-6 : 1e-13,
            );
          }
    });
  }

  it("large row, column and full reductions (the parallel paths) accumulate in float64", () => {
    const cases: [number[], number[]][] = [
      [[3, 70_001], [1]],
      [[70_001, 3], [0]],
      [
        [1, 200_003],
        [0, 1],
      ],
      [[40, 2050], [0]],
      [[257, 300], [0]],
      [
        [64, 9, 300],
        [0, 2],
      ],
    ];
    for (const [shape, dims] of cases) {
      const x = rand(shape, "float32", 54, -1, 1);
      for (const op of ["sum", "max", "min"] as const) {
        const [got, want] = reduceCase(op, x, dims);
        // NB: sums of +-1 values cancel; compare against the size of the terms, not of the result.
        expect(maxErr(got, want, op === "sum" ? 1 : 1e-30), `${op} ${shape} ${dims}`).toBeLessThan(1e-6);
      }
    }
  });

  it("max and min let a NaN win; an empty sum is 0 and an empty prod 1", () => {
    const x = rand([3, 4], "float32", 55);
    (x.storage.data as Float32Array)[5] = NaN;
    for (const dims of [[1], [0], [0, 1]])
      for (const op of ["max", "min", "sum"] as const) same(...reduceCase(op, x, dims));
    const empty = Tensor.empty([2, 0], "float32");
    same(...reduceCase("sum", empty, [1]));
    same(...reduceCase("prod", empty, [1]));
  });

  it("integer inputs: bool sum to int64, int32 max, int64 prod", () => {
    same(...reduceCase("sum", rand([7, 9], "bool", 56, -1, 1), [0, 1], "int64"));
    same(...reduceCase("sum", rand([7, 9], "bool", 57, -1, 1), [1], "int64"));
    same(...reduceCase("max", rand([7, 9], "int32", 58, -99, 99), [0]));
    same(...reduceCase("prod", rand([7, 3], "int64", 59, -5, 5), [1]));
    same(...reduceCase("sum", rand([7, 9], "int32", 60, -99, 99), [0], "int64"));
  });

  it("argmax and argmin: first occurrence, NaN wins, any dim and layout", () => {
    for (const dtype of ["float32", "float64", "int32"] as const) {
      const xs = [rand([5, 6, 7], dtype, 61, -3, 3), strided(rand([7, 6, 5], dtype, 62, -3, 3), [5, 6, 7], [1, 5, 30])];
      const ties = Tensor.empty([2, 4], dtype);
      (ties.storage.data as Float32Array).set([1, 3, 3, 0, 2, 2, 1, 2]);
      xs.push(ties);
      if (dtype !== "int32") {
        const nan = rand([3, 5], dtype, 63);
        (nan.storage.data as Float32Array).set([NaN], 2);
        (nan.storage.data as Float32Array).set([NaN], 9);
        xs.push(nan);
      }
      for (const x of xs)
        for (let dim = 0; dim < x.ndim; dim++)
          for (const op of ["argmax", "argmin"] as const) {
            const shape = x.shape.map((d, i) => (i === dim ? 1 : d));
            const got = Tensor.empty(shape, "int64");
            const want = Tensor.empty(shape, "int64");
            n.argReduce(op, view(x), dim, view(got));
            ref.argReduce(op, x, dim, want);
            expect(values(got), `${op} dim ${dim}`).toEqual(values(want));
          }
    }
  });
});

// ---- matmul, softmax, layer norm -------------------------------------------------------------

describe.skipIf(skip !== null)("native kernels: matmul, softmax, layerNorm", () => {
  const n = native as NativeBinding;

  function matmulCase(a: Tensor, b: Tensor): [Tensor, Tensor] {
    const shape = [Math.max(a.shape[0]!, b.shape[0]!), a.shape[1]!, b.shape[2]!];
    const got = Tensor.empty(shape, a.dtype);
    const want = Tensor.empty(shape, a.dtype);
    n.matmul(view(a), view(b), view(got));
    ref.matmul(a, b, want);
    return [got, want];
  }

  /** [B, rows, cols] in several layouts, all holding random values. */
  function mats(B: number, r: number, c: number, dtype: DType, seed: number): [string, Tensor][] {
    return [
      ["contiguous", rand([B, r, c], dtype, seed)],
      ["transposed", strided(rand([B, c, r], dtype, seed + 1), [B, r, c], [r * c, 1, r])],
      ["padded rows", strided(rand([B, r, c + 3], dtype, seed + 2), [B, r, c], [r * (c + 3), c + 3, 1], 2)],
      ["batch broadcast", strided(rand([r, c], dtype, seed + 3), [B, r, c], [0, c, 1])],
      ["odd strides", strided(rand([B, 2 * r, 2 * c], dtype, seed + 4), [B, r, c], [4 * r * c, 4 * c, 2])],
    ];
  }

  for (const dtype of ["float32", "float64"] as const) {
    it(`matmul on every layout pair, batched and broadcast (${dtype})`, () => {
      for (const [B, M, K, N] of [
        [3, 7, 11, 5],
        [1, 1, 9, 4],
        [2, 6, 1, 3],
        [1, 33, 70, 65],
      ]) {
        for (const [la, a] of mats(B, M, K, dtype, 70))
          for (const [lb, b] of mats(B, K, N, dtype, 80)) {
            const [got, want] = matmulCase(a, b);
            // NB: sgemm accumulates in float32 (error ~ K eps |terms|); the reference in float64.
            const e = maxErr(got, want, K);
            expect(e, `${la} @ ${lb} [${B},${M},${K},${N}]`).toBeLessThan(dtype === "float32" ? 1e-6 : 1e-14);
          }
      }
    });
  }

  it("matmul: 1-row and 1-column operands as the op layer views them, K = 0, integers", () => {
    const v = rand([9], "float32", 90);
    const m = rand([1, 9, 4], "float32", 91);
    close(...matmulCase(strided(v, [1, 1, 9], [0, 0, 1]), m), 1e-5, 1);
    close(...matmulCase(rand([1, 4, 9], "float32", 92), strided(v, [1, 9, 1], [0, 1, 0])), 1e-5, 1);
    const [z] = matmulCase(Tensor.empty([2, 3, 0], "float32"), Tensor.empty([2, 0, 4], "float32"));
    expect(values(z).every((x) => x === 0)).toBe(true);
    same(...matmulCase(rand([2, 3, 5], "int32", 93, -9, 9), rand([2, 5, 4], "int32", 94, -9, 9)));
    expect(() =>
      n.matmul(
        view(rand([1, 2, 3], "float32", 1)),
        view(rand([1, 4, 2], "float32", 1)),
        view(Tensor.empty([1, 2, 2], "float32")),
      ),
    ).toThrow(TypeError);
  });

  it("matmul with accumulate adds the product to out's contents (BLAS beta = 1), as the reference", () => {
    for (const dtype of ["float32", "float64", "int32"] as const) {
      const a = transposed(7, 11, dtype, 60);
      const b = rand([1, 11, 5], dtype, 61);
      const a3 = strided(a, [1, 7, 11], [0, ...a.strides]);
      const init = rand([1, 7, 5], dtype, 62);
      const got = like(init);
      const want = like(init);
      for (const t of [got, want]) (t.storage.data as Float64Array).set(init.storage.data as Float64Array);
      n.matmul(view(a3), view(b), view(got), true);
      ref.matmul(a3, b, want, true);
      if (dtype === "int32") same(got, want);
      else expect(maxErr(got, want, 11)).toBeLessThan(dtype === "float32" ? 1e-6 : 1e-14);
      // K = 0 leaves out as it was
      const z = like(init);
      (z.storage.data as Float64Array).set(init.storage.data as Float64Array);
      n.matmul(view(Tensor.empty([1, 7, 0], dtype)), view(Tensor.empty([1, 0, 5], dtype)), view(z), true);
      same(z, init);
    }
  });

  it("matmul with 4-D operands: head-split batch dims that do not merge, and broadcast batch dims", () => {
    /** t [..., 1, ...] broadcast to `shape` (stride 0), as the op layer's expand. */
    const expand = (t: Tensor, shape: number[]) =>
      strided(
        t,
        shape,
        t.shape.map((d, i) => (d === 1 && shape[i] !== 1 ? 0 : t.strides[i]!)),
      );
    for (const dtype of ["float32", "float64"] as const) {
      // q, k as attention splits them: [B, T, 3C] viewed as [B, heads, T, hs] (strides [T*3C, hs, 3C, 1])
      const [B, H, T, hs] = [3, 4, 5, 6];
      const qkv = rand([B, T, 3 * H * hs], dtype, 95);
      const C3 = 3 * H * hs;
      const q = strided(qkv, [B, H, T, hs], [T * C3, hs, C3, 1], 0);
      const kT = strided(qkv, [B, H, hs, T], [T * C3, hs, 1, C3], H * hs);
      const v = strided(qkv, [B, H, T, hs], [T * C3, hs, C3, 1], 2 * H * hs);
      const cases: [Tensor, Tensor, number[]][] = [
        [q, kT, [B, H, T, T]],
        [rand([B, H, T, T], dtype, 96), v, [B, H, T, hs]],
        [strided(rand([H, T, hs], dtype, 97), [B, H, T, hs], [0, T * hs, hs, 1]), kT, [B, H, T, T]], // broadcast B
        [
          expand(rand([1, H, T, hs], dtype, 98), [B, H, T, hs]),
          expand(rand([B, 1, hs, 2], dtype, 99), [B, H, hs, 2]),
          [B, H, T, 2],
        ],
        [
          strided(rand([B, 2 * T, hs], dtype, 89), [B, 2, T, hs], [2 * T * hs, hs, 2 * hs, 1]),
          rand([B, 2, hs, T], dtype, 88),
          [B, 2, T, T],
        ],
      ];
      for (const [a, b, shape] of cases) {
        const got = Tensor.empty(shape, dtype);
        const want = Tensor.empty(shape, dtype);
        n.matmul(view(a), view(b), view(got));
        ref.matmul(a, b, want);
        expect(maxErr(got, want, hs)).toBeLessThan(dtype === "float32" ? 1e-6 : 1e-14);
      }
    }
  });

  for (const dtype of ["float32", "float64"] as const) {
    it(`softmax and logSoftmax along any dim and layout, with -inf and NaN rows (${dtype})`, () => {
      const x = rand([4, 6, 37], dtype, 100, -20, 20);
      const d = x.storage.data as Float32Array;
      for (let i = 0; i < 37; i++) d[i] = -Infinity; // an all -inf row
      d[37 * 2 + 5] = NaN; // a NaN row
      d[37 * 3 + 1] = -Infinity;
      const xs = [x, strided(rand([37, 6, 4], dtype, 101, -5, 5), [4, 6, 37], [1, 4, 24]), sliced(8, 30, dtype, 102)];
      for (const t of xs)
        for (let dim = 0; dim < t.ndim; dim++)
          for (const log of [false, true]) {
            const got = like(t);
            const want = like(t);
            n.softmax(view(t), dim, log, view(got));
            ref.softmax(t, dim, log, want);
            close(got, want, dtype === "float32" ? 4e-6 : 1e-13, log ? 1 : 1e-30);
          }
    });
  }

  it("softmax along a leading dim (vectorized across columns, blocked), with -inf and NaN columns", () => {
    const x = rand([3, 5, 1500], "float32", 104, -20, 20);
    const d = x.storage.data as Float32Array;
    for (let k = 0; k < 5; k++) d[k * 1500 + 7] = -Infinity; // column 7 of p = 0: all -inf
    d[2 * 1500 + 1200] = NaN; // column 1200 of p = 0: NaN
    for (const dim of [0, 1])
      for (const log of [false, true]) {
        const got = like(x);
        const want = like(x);
        n.softmax(view(x), dim, log, view(got));
        ref.softmax(x, dim, log, want);
        close(got, want, 4e-6, log ? 1 : 1e-30);
      }
  });

  it("softmax and argmax of a 0-d tensor, as the reference", () => {
    const x = Tensor.empty([], "float32");
    (x.storage.data as Float32Array)[0] = 3;
    for (const log of [false, true]) {
      const got = like(x);
      const want = like(x);
      n.softmax(view(x), 0, log, view(got));
      ref.softmax(x, 0, log, want);
      same(got, want);
    }
    const got = Tensor.empty([], "int64");
    n.argReduce("argmax", view(x), 0, view(got));
    expect(values(got)).toEqual([0]);
  });

  it("softmax over many long rows (parallel, vectorized)", () => {
    const x = rand([64, 5003], "float32", 103, -30, 30);
    for (const log of [false, true]) {
      const got = like(x);
      const want = like(x);
      n.softmax(view(x), 1, log, view(got));
      ref.softmax(x, 1, log, want);
      close(got, want, 4e-6, log ? 1 : 1e-30);
    }
  });

  it("layerNorm matches a float64 computation, with and without weight and bias", () => {
    // NB: layerNorm is not in the typed wrapper yet (a fused path for later); call the module itself.
    const raw = createRequire(import.meta.url)(n.path) as { layerNorm: (...args: unknown[]) => void };
    for (const dtype of ["float32", "float64"] as const) {
      const [R, D] = [37, 300];
      const x = rand([R, D], dtype, 110, 3, 5); // NB: an offset mean tests the variance's cancellation
      const w = rand([D], dtype, 111);
      const b = rand([D], dtype, 112);
      for (const [wt, bt] of [
        [w, b],
        [null, null],
      ] as const) {
        const out = like(x);
        const mean = Tensor.empty([R], dtype);
        const rstd = Tensor.empty([R], dtype);
        raw.layerNorm(view(x), wt && view(wt), bt && view(bt), 1e-5, view(out), view(mean), view(rstd));
        const xs = values(x);
        const want = Tensor.empty([R, D], dtype);
        const wd = want.storage.data as Float64Array;
        for (let r = 0; r < R; r++) {
          const row = xs.slice(r * D, (r + 1) * D);
          const mu = row.reduce((s, v) => s + v, 0) / D;
          const varr = row.reduce((s, v) => s + (v - mu) ** 2, 0) / D;
          const rs = 1 / Math.sqrt(varr + 1e-5);
          expect(Math.abs(values(mean)[r]! - mu) / mu).toBeLessThan(dtype === "float32" ? 1e-6 : 1e-14);
          expect(Math.abs(values(rstd)[r]! - rs) / rs).toBeLessThan(dtype === "float32" ? 1e-5 : 1e-12);
          for (let j = 0; j < D; j++) {
            const wv = wt ? values(wt)[j]! : 1;
            const bv = bt ? values(bt)[j]! : 0;
            wd[r * D + j] = (row[j]! - mu) * rs * wv + bv;
          }
        }
        close(out, want, dtype === "float32" ? 2e-4 : 1e-11, 1);
      }
    }
  });
});

// ---- fused training kernels -----------------------------------------------------------------

describe.skipIf(skip !== null)(
  "native kernels: adamStep, layerNormBackward, softmaxBackward (fused.cc) and maskedSoftmax",
  () => {
    const n = native as NativeBinding;

    it("layerNormBackward matches the reference backend, with and without weight, any subset of outputs", () => {
      for (const dtype of ["float32", "float64"] as const) {
        const [R, D] = [37, 130];
        const x = rand([R, D], dtype, 130, 2, 4);
        const g = rand([R, D], dtype, 131);
        const w = rand([D], dtype, 132);
        const mean = Tensor.empty([R], dtype);
        const rstd = Tensor.empty([R], dtype);
        ref.layerNorm(x, w, null, 1e-5, like(x), mean, rstd);
        for (const wt of [w, null])
          for (const outs of [
            [true, true, true],
            [true, false, false],
            [false, true, true],
          ]) {
            const make = (on: boolean, shape: number[]) => (on ? Tensor.empty(shape, dtype) : null);
            const got = [make(outs[0]!, [R, D]), make(outs[1]!, [D]), make(outs[2]!, [D])] as const;
            const want = [make(outs[0]!, [R, D]), make(outs[1]!, [D]), make(outs[2]!, [D])] as const;
            const opt = (t: Tensor | null) => (t ? view(t) : null);
            n.layerNormBackward(
              view(g),
              view(x),
              view(mean),
              view(rstd),
              opt(wt),
              opt(got[0]),
              opt(got[1]),
              opt(got[2]),
            );
            ref.layerNormBackward(g, x, mean, rstd, wt, want[0], want[1], want[2]);
            // NB: the float64 sums run in another order (and gx's float32 means may round apart by an ulp)
            for (let i = 0; i < 3; i++) if (got[i]) close(got[i]!, want[i]!, dtype === "float32" ? 2e-5 : 1e-12, 1);
          }
      }
      const x = rand([2, 3], "float32", 1);
      expect(() =>
        n.layerNormBackward(
          view(x),
          view(x),
          view(rand([2], "float32", 2)),
          view(rand([3], "float32", 3)),
          null,
          null,
          null,
          null,
        ),
      ).toThrow(TypeError);
    });

    it("geluBackward equals the native derivative times g bit for bit (both forms, tails, streaming sizes, specials)", () => {
      // NB: 262,144 elements is where the vector loops switch to streaming stores; 37 and 1,031 end in a tail
      for (const len of [37, 1031, 262144 + 5])
        for (const tanh of [false, true]) {
          const x = rand([len], "float32", 190, -25, 25, true);
          const g = rand([len], "float32", 191, -3, 3);
          const got = like(x);
          const want = like(x);
          n.geluBackward(view(x), view(g), tanh, view(got));
          n.unary(tanh ? "geluTanhGrad" : "geluGrad", view(x), view(want));
          n.binary("mul", view(g), view(want), view(want));
          same(got, want);
        }
      const x = rand([4, 5], "float32", 1);
      expect(() => n.geluBackward(view(x), view(rand([4, 4], "float32", 2)), false, view(like(x)))).toThrow(TypeError);
      expect(() =>
        n.geluBackward(
          view(rand([3], "float64", 3)),
          view(rand([3], "float64", 4)),
          false,
          view(rand([3], "float64", 5)),
        ),
      ).toThrow(TypeError);
      expect(() => n.geluBackward(view(x), view(x), false, view(transposed(5, 4, "float32", 6)))).toThrow(TypeError);
    });

    it("softmaxBackward and its log form match the reference backend along the last dim", () => {
      for (const dtype of ["float32", "float64"] as const) {
        const x = rand([3, 5, 70], dtype, 150, -6, 6);
        const g = rand([3, 5, 70], dtype, 151);
        for (const log of [false, true]) {
          const y = like(x);
          ref.softmax(x, 2, log, y);
          const got = like(x);
          const want = like(x);
          n.softmaxBackward(view(y), view(g), log, view(got));
          ref.softmaxBackward(y, g, 2, log, want);
          // NB: the row sums run in another order; exp is glibc's vs V8's in the log form
          close(got, want, dtype === "float32" ? 1e-5 : 1e-12, 1e-3);
        }
      }
      const t = rand([2, 3], "float32", 1);
      expect(() => n.softmaxBackward(view(t), view(transposed(2, 3, "float32", 2)), false, view(like(t)))).toThrow(
        TypeError,
      );
    });

    it("maskedSoftmax equals the reference backend (div, mask, softmax), fully masked rows and NaN included", () => {
      // NB: S = 37 also runs the float32 divide-and-mask loop's vector body (8 lanes), not only its tail
      for (const dtype of ["float32", "float64"] as const)
        for (const S of [7, 37]) {
          const T = 6;
          const x = rand([2, 3, T, S], dtype, 160, -8, 8);
          (x.storage.data as Float32Array)[S * 2 + 3] = NaN; // one NaN row
          const mask = rand([T, S], "bool", 161, -1, 1);
          for (let j = 0; j < S; j++) (mask.storage.data as Uint8Array)[4 * S + j] = 1; // row 4 fully masked
          const got = like(x);
          const want = like(x);
          n.maskedSoftmax(view(x), view(mask), Math.sqrt(8), view(got));
          ref.maskedSoftmax(x, mask, Math.sqrt(8), want);
          close(got, want, dtype === "float32" ? 4e-6 : 1e-13, 1e-30);
        }
      const x = rand([2, 3], "float32", 1);
      expect(() => n.maskedSoftmax(view(x), view(rand([3, 2], "bool", 2)), 1, view(like(x)))).toThrow(TypeError);
    });

    it("maskedSoftmax with a causal mask: zeros past the span exactly, and a NaN or +inf in it makes the whole row NaN", () => {
      // NB: float32 rows skip the columns outside their mask row's unmasked span; the composite writes exp(-inf) = 0
      // there, and NaN once the row's sum is NaN
      // NB: T = 37 and 64 run the one-pass short rows with and without a tail; 70 runs the longer rows' path
      for (const T of [5, 37, 64, 70]) {
        const x = rand([2, 2, T, T], "float32", 170, -6, 6);
        const xd = x.storage.data as Float32Array;
        xd[T * 3 + 1] = NaN; // row 3, column 1: unmasked
        xd[T * (T + 2) + 0] = Infinity; // second head's row 2, column 0: unmasked
        xd[T * 1 + 4] = NaN; // row 1, column 4: masked (the future), so no effect
        const mask = Tensor.empty([T, T], "bool");
        const md = mask.storage.data as Uint8Array;
        for (let t = 0; t < T; t++) for (let j = 0; j < T; j++) md[t * T + j] = j > t ? 1 : 0;
        const got = like(x);
        (got.storage.data as Float32Array).fill(7); // every element must be written
        const want = like(x);
        n.maskedSoftmax(view(x), view(mask), Math.sqrt(32), view(got));
        ref.maskedSoftmax(x, mask, Math.sqrt(32), want);
        close(got, want, 4e-6, 1e-30);
        const g = got.storage.data as Float32Array;
        for (const row of [3, T + 2]) for (let j = 0; j < T; j++) expect(g[row * T + j]).toBeNaN();
        for (let j = 2; j < T; j++) expect(g[T + j]).toBe(0); // row 1 past its span, the masked NaN included
        for (let t = 0; t < T; t++)
          if (t !== 3 && t !== 2) {
            let sum = 0;
            for (let j = 0; j <= t; j++) sum += g[t * T + j]!;
            expect(Math.abs(sum - 1)).toBeLessThan(1e-5);
          }
      }
    });

    it("maskedSoftmax with a sliding-window mask and masked columns inside a span equals the reference", () => {
      // NB: a window's rows start past column 0 (lo > 0); rows 9 and 20 have masked columns inside their span,
      // which the one-pass path must leave to the divide-and-mask loop
      for (const T of [23, 48]) {
        const x = rand([3, T, T], "float32", 180, -30, 30);
        const mask = Tensor.empty([T, T], "bool");
        const md = mask.storage.data as Uint8Array;
        for (let t = 0; t < T; t++) for (let j = 0; j < T; j++) md[t * T + j] = j > t || j < t - 12 ? 1 : 0;
        md[9 * T + 5] = 1;
        md[20 * T + 15] = 1;
        const got = like(x);
        (got.storage.data as Float32Array).fill(7);
        const want = like(x);
        n.maskedSoftmax(view(x), view(mask), 0.5, view(got));
        ref.maskedSoftmax(x, mask, 0.5, want);
        close(got, want, 4e-6, 1e-30);
        const g = got.storage.data as Float32Array;
        for (const [t, j] of [
          [9, 5],
          [20, 15],
          [20, 0],
          [20, 21],
        ] as const)
          expect(g[t * T + j]).toBe(0);
      }
    });

    it("adamStep equals the reference backend exactly: AdamW, Adam with L2, amsgrad, maximize, specials", () => {
      for (const dtype of ["float32", "float64"] as const)
        for (const [decay, l2, amsgrad, maximize] of [
          [1 - 3e-3 * 0.01, 0, false, false],
          [1, 0.1, true, false],
          [1 - 1e-3, 0, true, true],
        ] as const) {
          const N = 1000;
          const init = [rand([N], dtype, 140, -2, 2, true), rand([N], dtype, 141), rand([N], dtype, 142, -0.1, 0.1)];
          const vs = rand([N], dtype, 143, 0, 0.02);
          const vmax = rand([N], dtype, 144, 0, 0.03);
          const clone = (t: Tensor) => {
            const c = like(t);
            (c.storage.data as Float64Array).set(t.storage.data as Float64Array);
            return c;
          };
          const copies = () => [...init, vs, vmax].map(clone);
          const [pG, gG, mG, vG, xG] = copies() as [Tensor, Tensor, Tensor, Tensor, Tensor];
          const [pW, gW, mW, vW, xW] = copies() as [Tensor, Tensor, Tensor, Tensor, Tensor];
          const h = {
            decay,
            l2,
            beta1: 0.9,
            oneMinusBeta1: 1 - 0.9,
            beta2: 0.999,
            oneMinusBeta2: 1 - 0.999,
            bc2Sqrt: Math.sqrt(1 - 0.999 ** 3),
            eps: 1e-8,
            negStepSize: -(3e-3 / (1 - 0.9 ** 3)),
            maximize,
          };
          n.adamStep(view(pG), view(gG), view(mG), view(vG), amsgrad ? view(xG) : null, h.decay, h.l2, h.beta1,
          h.oneMinusBeta1, h.beta2, h.oneMinusBeta2, h.bc2Sqrt, h.eps, h.negStepSize, h.maximize); // prettier-ignore
          ref.adamStep(pW, gW, mW, vW, amsgrad ? xW : null, h);
          for (const [a, b] of [
            [pG, pW],
            [mG, mW],
            [vG, vW],
            [xG, xW],
          ] as const)
            same(a, b);
        }
    });
  },
);

// ---- indexing, copy, fill --------------------------------------------------------------------

describe.skipIf(skip !== null)("native kernels: indexing, copy and fill", () => {
  const n = native as NativeBinding;

  function idx(values: number[], dtype: "int64" | "int32" = "int64"): Tensor {
    const t = Tensor.empty([values.length], dtype);
    values.forEach((v, i) => {
      if (dtype === "int64") (t.storage.data as BigInt64Array)[i] = BigInt(v);
      else (t.storage.data as Int32Array)[i] = v;
    });
    return t;
  }

  it("indexSelect along every dim, negative indices, int32 index, strided x, any dtype", () => {
    for (const dtype of ["float32", "float64", "int64", "uint8"] as const) {
      const xs = [
        rand([4, 5, 6], dtype, 120, -9, 9),
        strided(rand([6, 5, 4], dtype, 121, -9, 9), [4, 5, 6], [1, 4, 20]),
      ];
      for (const x of xs)
        for (let dim = 0; dim < 3; dim++)
          for (const it of [idx([0, 3, -1, 2, 2]), idx([1, -4], "int32"), strided(idx([3, 9, 0, 7, 1]), [3], [2], 0)]) {
            const shape = [...x.shape];
            shape[dim] = it.shape[0]!;
            const got = Tensor.empty(shape, dtype);
            const want = Tensor.empty(shape, dtype);
            n.indexSelect(view(x), dim, view(it), view(got));
            ref.indexSelect(x, dim, it, want);
            same(got, want);
          }
    }
  });

  it("an out-of-range index throws RangeError with torch's message, before writing anything", () => {
    const x = rand([3, 2], "float32", 122);
    const out = Tensor.empty([2, 2], "float32");
    expect(() => n.indexSelect(view(x), 0, view(idx([1, 5])), view(out))).toThrow(
      new RangeError("index 5 is out of bounds for dimension 0 with size 3"),
    );
    expect(() => n.indexSelect(view(x), 0, view(idx([-4, 0])), view(out))).toThrow(
      /index -4 is out of bounds for dimension 0 with size 3/,
    );
    const g = Tensor.empty([3, 1], "int64");
    (g.storage.data as BigInt64Array).set([0n, 2n, 1n]);
    expect(() => n.gather(view(x), 1, view(g), view(Tensor.empty([3, 1], "float32")))).toThrow(
      /index 2 is out of bounds for dimension 1 with size 2/,
    );
    const dst = Tensor.empty([3, 2], "float32");
    expect(() => n.scatterAdd(view(dst), 1, view(g), view(x))).toThrow(RangeError);
    expect(values(dst).every((v) => v === 0)).toBe(true);
  });

  it("gather and scatterAdd along every dim with smaller and strided index and src", () => {
    for (const dtype of ["float32", "float64", "int32"] as const) {
      const x = rand([4, 5, 6], dtype, 130, -9, 9);
      for (let dim = 0; dim < 3; dim++) {
        const size = x.shape[dim]!;
        const ishape = [3, 4, 5];
        ishape[dim] = 7; // longer than x along dim: repeated targets in scatterAdd
        const index = Tensor.empty(ishape, "int64");
        const r = rng(131 + dim);
        const d = index.storage.data as BigInt64Array;
        for (let i = 0; i < d.length; i++) d[i] = BigInt(Math.floor(r() * 2 * size) - size);
        const tIndex = index;
        const got = Tensor.empty(ishape, dtype);
        const want = Tensor.empty(ishape, dtype);
        n.gather(view(x), dim, view(tIndex), view(got));
        ref.gather(x, dim, tIndex, want);
        same(got, want);

        const srcShape = ishape.map((s) => s + 1);
        const src = strided(rand(srcShape.slice().reverse(), dtype, 132, -9, 9), srcShape, [
          1,
          srcShape[0]!,
          srcShape[0]! * srcShape[1]!,
        ]);
        const dGot = rand([4, 5, 6], dtype, 133, -9, 9);
        const dWant = rand([4, 5, 6], dtype, 133, -9, 9);
        n.scatterAdd(view(dGot), dim, view(tIndex), view(src));
        ref.scatterAdd(dWant, dim, tIndex, src);
        same(dGot, dWant);
      }
    }
  });

  it("scatterAdd of whole rows (the embedding backward's broadcast index column) equals the reference", () => {
    for (const dtype of ["float32", "float64", "int32"] as const)
      for (const itype of ["int64", "int32"] as const)
        for (const [N, V, D, parts] of [
          [50, 7, 5, 1],
          [700, 70, 128, 3], // split over the pool, column blocks
        ]) {
          // index [N, D]: one column of row numbers (repeated, negative ones too) broadcast along dim 1
          const col = Tensor.empty([N], itype);
          const r = rng(140 + N);
          for (let i = 0; i < N; i++) {
            const v = Math.floor(r() * 2 * V) - V;
            if (itype === "int64") (col.storage.data as BigInt64Array)[i] = BigInt(v);
            else (col.storage.data as Int32Array)[i] = v;
          }
          const index = strided(col, [N, D], [1, 0], 0);
          // src with padded rows, dst a window of a wider tensor (offset, row stride > D)
          const src = strided(rand([N, D + 2], dtype, 141, -9, 9), [N, D], [D + 2, 1], 1);
          const dGot = strided(rand([V, D + parts], dtype, 142, -9, 9), [V, D], [D + parts, 1], parts);
          const dWant = strided(rand([V, D + parts], dtype, 142, -9, 9), [V, D], [D + parts, 1], parts);
          n.scatterAdd(view(dGot), 0, view(index), view(src));
          ref.scatterAdd(dWant, 0, index, src);
          same(dGot, dWant);
          // an index out of range: RangeError, nothing written
          const before = values(dGot);
          if (itype === "int64") (col.storage.data as BigInt64Array)[N - 1] = BigInt(V);
          else (col.storage.data as Int32Array)[N - 1] = V;
          expect(() => n.scatterAdd(view(dGot), 0, view(index), view(src))).toThrow(
            new RangeError(`index ${V} is out of bounds for dimension 0 with size ${V}`),
          );
          expect(values(dGot)).toEqual(before);
        }
  });

  it("copy casts between every pair of dtypes like the reference, on strided views", () => {
    const dtypes = ["float32", "float64", "int32", "int64", "uint8"] as const;
    for (const from of dtypes)
      for (const to of dtypes) {
        const src = from.startsWith("float")
          ? rand([4, 9], from, 140, -300, 300, true)
          : rand([4, 9], from, 140, -300, 300);
        const srcT = strided(src, [9, 4], [1, 9]);
        const got = Tensor.empty([9, 4], to);
        const want = Tensor.empty([9, 4], to);
        n.copy(view(srcT), view(got));
        ref.copy(srcT, want);
        same(got, want);
        // into a transposed destination
        const gotT = strided(Tensor.empty([4, 9], to), [9, 4], [1, 9]);
        const wantT = strided(Tensor.empty([4, 9], to), [9, 4], [1, 9]);
        n.copy(view(srcT), view(gotT));
        ref.copy(srcT, wantT);
        expect(values(strided(gotT, [36], [1], 0))).toEqual(values(strided(wantT, [36], [1], 0)));
      }
  });

  it("large contiguous copies and fills", () => {
    const src = rand([1 << 20], "float32", 150);
    const dst = like(src);
    n.copy(view(src), view(dst));
    expect(firstDifference(values(dst), values(src))).toBe("none");
    const d64 = like(src, "float64");
    n.copy(view(src), view(d64));
    expect(firstDifference(values(d64), values(src))).toBe("none");
    for (const [dtype, v] of [
      ["float32", 1.5],
      ["int32", -7.9],
      ["int64", 3e10],
      ["uint8", 300],
      ["float64", NaN],
    ] as const) {
      const t = strided(Tensor.empty([6, 8], dtype), [6, 4], [8, 2], 1);
      const w = strided(Tensor.empty([6, 8], dtype), [6, 4], [8, 2], 1);
      n.fill(view(t), v);
      ref.fill(w, v);
      expect(values(strided(t, [48], [1], 0))).toEqual(values(strided(w, [48], [1], 0)));
    }
  });
});
