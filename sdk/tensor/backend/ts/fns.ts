/**
 * The scalar functions of the TypeScript backend's elementwise kernels (./index.ts), by op.
 */
import type { BinaryOp, UnaryOp } from "../interface.js";
import { erf, gelu, geluGrad, geluTanh, geluTanhGrad, roundHalfEven, sigmoid } from "./math.js";

export type Fn1 = (x: number) => number;
export type Fn2 = (a: number, b: number) => number;

// NB: module-level functions, not a closure made per call: V8 holds a closure site's optimized code weakly, so closures made per call and dead at a full GC were compiled again and again (docs/architecture.md, small-op speed)
const U_NEG: Fn1 = (x) => -x;
const U_RSQRT: Fn1 = (x) => 1 / Math.sqrt(x);
const U_SIGN: Fn1 = (x) => (x > 0 ? 1 : x < 0 ? -1 : x === 0 ? 0 : x);
const U_RELU: Fn1 = (x) => (x > 0 ? x : Number.isNaN(x) ? x : 0);
const U_RECIPROCAL: Fn1 = (x) => 1 / x;
const U_SQUARE: Fn1 = (x) => x * x;
const U_LOGICALNOT: Fn1 = (x) => (x === 0 ? 1 : 0);
const U_ISNAN: Fn1 = (x) => (Number.isNaN(x) ? 1 : 0);
const B_ADD: Fn2 = (a, b) => a + b;
const B_SUB: Fn2 = (a, b) => a - b;
const B_MUL: Fn2 = (a, b) => a * b;
const B_DIV: Fn2 = (a, b) => a / b;
const B_MAXIMUM: Fn2 = (a, b) => (Number.isNaN(a) || Number.isNaN(b) ? Number.NaN : a > b ? a : b);
const B_MINIMUM: Fn2 = (a, b) => (Number.isNaN(a) || Number.isNaN(b) ? Number.NaN : a < b ? a : b);
const B_EQ: Fn2 = (a, b) => (a === b ? 1 : 0);
const B_NE: Fn2 = (a, b) => (a !== b ? 1 : 0);
const B_LT: Fn2 = (a, b) => (a < b ? 1 : 0);
const B_LE: Fn2 = (a, b) => (a <= b ? 1 : 0);
const B_GT: Fn2 = (a, b) => (a > b ? 1 : 0);
const B_GE: Fn2 = (a, b) => (a >= b ? 1 : 0);
const B_LOGICALAND: Fn2 = (a, b) => (a !== 0 && b !== 0 ? 1 : 0);
const B_LOGICALOR: Fn2 = (a, b) => (a !== 0 || b !== 0 ? 1 : 0);

export function unaryFn(op: UnaryOp, args: readonly number[]): Fn1 {
  switch (op) {
    case "neg":
      return U_NEG;
    case "exp":
      return Math.exp;
    case "log":
      return Math.log;
    case "sqrt":
      return Math.sqrt;
    case "rsqrt":
      return U_RSQRT;
    case "abs":
      return Math.abs;
    case "sign":
      return U_SIGN;
    case "tanh":
      return Math.tanh;
    case "sigmoid":
      return sigmoid;
    case "relu":
      return U_RELU;
    case "gelu":
      return gelu;
    case "geluTanh":
      return geluTanh;
    case "geluGrad":
      return geluGrad;
    case "geluTanhGrad":
      return geluTanhGrad;
    case "erf":
      return erf;
    case "sin":
      return Math.sin;
    case "cos":
      return Math.cos;
    case "reciprocal":
      return U_RECIPROCAL;
    case "square":
      return U_SQUARE;
    case "log1p":
      return Math.log1p;
    case "expm1":
      return Math.expm1;
    case "floor":
      return Math.floor;
    case "ceil":
      return Math.ceil;
    case "round":
      return roundHalfEven;
    case "logicalNot":
      return U_LOGICALNOT;
    case "isnan":
      return U_ISNAN;
    case "powScalar": {
      const e = args[0]!;
      if (e === 2) return U_SQUARE;
      if (e === 0.5) return Math.sqrt;
      return (x) => x ** e;
    }
    case "clamp": {
      const lo = args[0] ?? Number.NaN;
      const hi = args[1] ?? Number.NaN;
      return (x) => {
        if (Number.isNaN(x)) return x;
        let y = x;
        if (!Number.isNaN(lo) && y < lo) y = lo;
        if (!Number.isNaN(hi) && y > hi) y = hi;
        return y;
      };
    }
  }
}

export function binaryFn(op: BinaryOp, integral: boolean): Fn2 {
  switch (op) {
    case "add":
      return B_ADD;
    case "sub":
      return B_SUB;
    case "mul":
      return B_MUL;
    case "div":
      return B_DIV;
    case "pow":
      return integral ? (a, b) => Math.trunc(a ** b) : (a, b) => a ** b;
    case "maximum":
      return B_MAXIMUM;
    case "minimum":
      return B_MINIMUM;
    case "eq":
      return B_EQ;
    case "ne":
      return B_NE;
    case "lt":
      return B_LT;
    case "le":
      return B_LE;
    case "gt":
      return B_GT;
    case "ge":
      return B_GE;
    case "logicalAnd":
      return B_LOGICALAND;
    case "logicalOr":
      return B_LOGICALOR;
  }
}
