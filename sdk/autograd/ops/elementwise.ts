/**
 * Elementwise ops with their gradient rules, one per op, forward beside
 * backward. Binary ops broadcast; the gradient of a broadcast input is summed
 * back to its shape (sumToShape). Integer inputs to float ops compute in the
 * default float dtype, as torch does.
 */
import { DTypeError, ShapeError, ValueError } from "../../errors/index.js";
import { arraysEqual } from "../../util/index.js";
import { broadcastShapes } from "../../tensor/shape.js";
import type { BinaryOp, UnaryOp } from "../../tensor/backend/interface.js";
import { getBackend } from "../../tensor/backend/registry.js";
import * as raw from "../../tensor/raw.js";
import { Tensor } from "../../tensor/tensor.js";
import { type Operand, recordOp } from "../function.js";

const sumTo = (g: Tensor, x: Operand): Tensor | null => (x instanceof Tensor ? raw.sumToShape(g, x.shape) : null);

/** The tensors among `saved` whose partner input (same position in `whenGrad`) requires grad. */
function savedFor(saved: Operand[], whenGrad: Operand[]): Tensor[] {
  return saved.filter(
    (s, i): s is Tensor => s instanceof Tensor && whenGrad[i] instanceof Tensor && (whenGrad[i] as Tensor).requiresGrad,
  );
}

function checkMixed(op: string, a: Operand, b: Operand): void {
  // NB: bool tensors in arithmetic are fine (promoted); only `sub`/`neg` of bools are refused, as torch does.
  if (op === "sub" && a instanceof Tensor && b instanceof Tensor && a.dtype === "bool" && b.dtype === "bool")
    throw new DTypeError(
      "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logicalXor()` operator instead.",
    );
}

export function add(a: Operand, b: Operand, alpha = 1): Tensor {
  const bb = alpha === 1 ? b : b instanceof Tensor ? raw.binary("mul", b, alpha) : Number(b) * alpha;
  const out = raw.binary("add", a, bb);
  return recordOp("AddBackward0", out, [a, b], (g) => [
    sumTo(g, a),
    b instanceof Tensor ? sumTo(alpha === 1 ? g : raw.binary("mul", g, alpha), b) : null,
  ]);
}

export function sub(a: Operand, b: Operand, alpha = 1): Tensor {
  checkMixed("sub", a, b);
  const bb = alpha === 1 ? b : b instanceof Tensor ? raw.binary("mul", b, alpha) : Number(b) * alpha;
  const out = raw.binary("sub", a, bb);
  return recordOp("SubBackward0", out, [a, b], (g) => [
    sumTo(g, a),
    b instanceof Tensor ? sumTo(raw.binary("mul", g, -alpha), b) : null,
  ]);
}

export function mul(a: Operand, b: Operand): Tensor {
  const out = raw.binary("mul", a, b);
  return recordOp(
    "MulBackward0",
    out,
    [a, b],
    (g, needs) => [
      needs[0] ? sumTo(raw.binary("mul", g, b), a) : null,
      needs[1] ? sumTo(raw.binary("mul", g, a), b) : null,
    ],
    // each input is needed only for the other's gradient
    savedFor([a, b], [b, a]),
  );
}

export function div(a: Operand, b: Operand): Tensor {
  const out = raw.binary("div", a, b);
  return recordOp(
    "DivBackward0",
    out,
    [a, b],
    (g) => [
      sumTo(raw.binary("div", g, b), a),
      b instanceof Tensor ? sumTo(raw.unary("neg", raw.binary("div", raw.binary("mul", g, out), b)), b) : null,
    ],
    [out, ...[b].filter((x): x is Tensor => x instanceof Tensor)],
  );
}

export function pow(a: Operand, b: Operand): Tensor {
  if (!(a instanceof Tensor) && b instanceof Tensor) {
    // scalar ** tensor
    const out = raw.binary("pow", a, b);
    return recordOp(
      "PowBackward2",
      out,
      [a, b],
      (g) => [null, raw.binary("mul", raw.binary("mul", g, out), Math.log(Number(a)))],
      [out],
    );
  }
  const out = raw.binary("pow", a, b);
  return recordOp(
    b instanceof Tensor ? "PowBackward1" : "PowBackward0",
    out,
    [a, b],
    (g) => {
      // d/da a^b = b * a^(b-1)
      const ga = raw.binary("mul", g, raw.binary("mul", b, raw.binary("pow", a, raw.binary("sub", b, 1))));
      let gb: Tensor | null = null;
      if (b instanceof Tensor) {
        // d/db a^b = a^b * log(a), defined as 0 where a == 0 and b >= 0
        const at = a as Tensor;
        const logA = raw.where(
          raw.binary("logicalAnd", raw.binary("eq", at, 0), raw.binary("ge", b, 0)),
          0,
          raw.floatUnary("log", at),
        );
        gb = sumTo(raw.binary("mul", raw.binary("mul", g, out), logA), b);
      }
      return [sumTo(ga, a), gb];
    },
    [out, ...[a, b].filter((x): x is Tensor => x instanceof Tensor)],
  );
}

/**
 * Defines a float unary op with the rule d(out)/dx expressed with (x, out);
 * `reads` says which of them the rule uses, so only that one is saved (and
 * version-checked: in-place variants keep working for rules that read out).
 */
function floatUnaryOp(op: UnaryOp, name: string, reads: "x" | "out", deriv: (x: Tensor, out: Tensor) => Tensor) {
  return (x: Tensor): Tensor => {
    const out = raw.floatUnary(op, x);
    return recordOp(name, out, [x], (g) => [raw.binary("mul", g, deriv(x, out))], [reads === "x" ? x : out]);
  };
}

export const exp = floatUnaryOp("exp", "ExpBackward0", "out", (_x, out) => out);
export const log = floatUnaryOp("log", "LogBackward0", "x", (x) => raw.unary("reciprocal", x));
export const sqrt = floatUnaryOp("sqrt", "SqrtBackward0", "out", (_x, out) => raw.binary("div", 0.5, out));
export const rsqrt = floatUnaryOp("rsqrt", "RsqrtBackward0", "out", (_x, out) =>
  raw.binary("mul", raw.unary("powScalar", out, [3]), -0.5),
);
export const tanh = floatUnaryOp("tanh", "TanhBackward0", "out", (_x, out) =>
  raw.binary("sub", 1, raw.unary("square", out)),
);
export const sigmoid = floatUnaryOp("sigmoid", "SigmoidBackward0", "out", (_x, out) =>
  raw.binary("mul", out, raw.binary("sub", 1, out)),
);
export const erf = floatUnaryOp("erf", "ErfBackward0", "x", (x) =>
  raw.binary("mul", raw.unary("exp", raw.unary("neg", raw.unary("square", x))), 2 / Math.sqrt(Math.PI)),
);
export const sin = floatUnaryOp("sin", "SinBackward0", "x", (x) => raw.unary("cos", x));
export const cos = floatUnaryOp("cos", "CosBackward0", "x", (x) => raw.unary("neg", raw.unary("sin", x)));
export const reciprocal = floatUnaryOp("reciprocal", "ReciprocalBackward0", "out", (_x, out) =>
  raw.unary("neg", raw.unary("square", out)),
);
export const log1p = floatUnaryOp("log1p", "Log1PBackward0", "x", (x) =>
  raw.unary("reciprocal", raw.binary("add", x, 1)),
);
export const expm1 = floatUnaryOp("expm1", "Expm1Backward0", "out", (_x, out) => raw.binary("add", out, 1));

/** Ops that keep the input dtype (valid on integers too); a null rule means a zero gradient. */
function sameTypeUnaryOp(
  op: UnaryOp,
  name: string,
  reads: "x" | "out",
  deriv: ((x: Tensor, out: Tensor) => Tensor) | null,
) {
  return (x: Tensor): Tensor => {
    const out = raw.unary(op, x);
    const saved = deriv ? [reads === "x" ? x : out] : [];
    return recordOp(
      name,
      out,
      [x],
      (g) => [deriv ? raw.binary("mul", g, deriv(x, out)) : raw.binary("mul", g, 0)],
      saved,
    );
  };
}

export const neg = (x: Tensor): Tensor => {
  if (x.dtype === "bool")
    throw new DTypeError("Negation, the `-` operator, on a bool tensor is not supported. Use logicalNot() instead.");
  const out = raw.unary("neg", x);
  return recordOp("NegBackward0", out, [x], (g) => [raw.unary("neg", g)]);
};
export const abs = sameTypeUnaryOp("abs", "AbsBackward0", "x", (x) => raw.unary("sign", x));
export const sign = sameTypeUnaryOp("sign", "SignBackward0", "x", null);
export const square = sameTypeUnaryOp("square", "PowBackward0", "x", (x) => raw.binary("mul", x, 2));
/** relu; its backward is torch's threshold_backward: g where out > 0, else 0 (one select, no float mask). */
export const relu = (x: Tensor): Tensor => {
  const out = raw.unary("relu", x);
  return recordOp("ReluBackward0", out, [x], (g) => [raw.where(raw.binary("gt", out, 0), g, 0)], [out]);
};
export const floor = sameTypeUnaryOp("floor", "FloorBackward0", "x", null);
export const ceil = sameTypeUnaryOp("ceil", "CeilBackward0", "x", null);
export const round = sameTypeUnaryOp("round", "RoundBackward0", "x", null);

/** GELU, exact (erf) by default or the tanh approximation with { approximate: "tanh" }. */
export function gelu(x: Tensor, opts: { approximate?: "none" | "tanh" } = {}): Tensor {
  const tanhForm = opts.approximate === "tanh";
  const out = raw.floatUnary(tanhForm ? "geluTanh" : "gelu", x);
  return recordOp(
    "GeluBackward0",
    out,
    [x],
    (g) => {
      const deriv = tanhForm ? "geluTanhGrad" : "geluGrad";
      if (g.dtype !== x.dtype || !arraysEqual(g.shape, x.shape))
        return [raw.binary("mul", g, raw.floatUnary(deriv, x))];
      // NB: one pass where the backend has it (native float32); else the derivative, multiplied by g in place
      // (fresh, and an elementwise out may alias an input): the same numbers, one allocation either way
      const out = raw.output(x.shape, x.dtype, x.device);
      const backend = getBackend();
      if (!backend.geluBackward?.(x, g, tanhForm, out)) {
        backend.unary(deriv, x, out);
        backend.binary("mul", g, out, out);
      }
      return [out];
    },
    [x],
  );
}

/** Clamps into [min, max]; either bound may be undefined (or null). */
export function clamp(x: Tensor, min?: number | null, max?: number | null): Tensor {
  if ((min === undefined || min === null) && (max === undefined || max === null))
    throw new ValueError("clamp(): at least one of 'min' or 'max' must be given");
  const lo = min ?? Number.NaN;
  const hi = max ?? Number.NaN;
  const isFloatBound = (!Number.isInteger(lo) && !Number.isNaN(lo)) || (!Number.isInteger(hi) && !Number.isNaN(hi));
  const out = isFloatBound ? raw.floatUnary("clamp", x, [lo, hi]) : raw.unary("clamp", x, [lo, hi]);
  return recordOp(
    "ClampBackward1",
    out,
    [x],
    (g) => {
      let mask = raw.binary("eq", x, x); // all true except NaN
      if (!Number.isNaN(lo)) mask = raw.binary("logicalAnd", mask, raw.binary("ge", x, lo));
      if (!Number.isNaN(hi)) mask = raw.binary("logicalAnd", mask, raw.binary("le", x, hi));
      return [raw.where(mask, g, 0)];
    },
    [x],
  );
}

function extremum(op: "maximum" | "minimum", a: Tensor, b: Tensor): Tensor {
  const out = raw.binary(op, a, b);
  const win: BinaryOp = op === "maximum" ? "gt" : "lt";
  return recordOp(
    op === "maximum" ? "MaximumBackward0" : "MinimumBackward0",
    out,
    [a, b],
    (g) => {
      // ties split the gradient evenly, as torch does
      const ties = raw.binary("mul", raw.cast(raw.binary("eq", a, b), g.dtype), 0.5);
      const wa = raw.binary("add", raw.cast(raw.binary(win, a, b), g.dtype), ties);
      const wb = raw.binary("add", raw.cast(raw.binary(win, b, a), g.dtype), ties);
      return [raw.sumToShape(raw.binary("mul", g, wa), a.shape), raw.sumToShape(raw.binary("mul", g, wb), b.shape)];
    },
    [a, b],
  );
}

export const maximum = (a: Tensor, b: Tensor): Tensor => extremum("maximum", a, b);
export const minimum = (a: Tensor, b: Tensor): Tensor => extremum("minimum", a, b);

export function where(cond: Tensor, a: Operand, b: Operand): Tensor {
  const out = raw.where(cond, a, b);
  return recordOp(
    "WhereBackward0",
    out,
    [cond, a, b],
    (g) => [null, sumTo(raw.where(cond, g, 0), a), sumTo(raw.where(cond, 0, g), b)],
    [cond],
  );
}

/** x with `value` where mask is true (mask broadcasts to x). */
export function maskedFill(x: Tensor, mask: Tensor, value: number | Tensor): Tensor {
  if (mask.dtype !== "bool")
    throw new DTypeError(`maskedFill only supports boolean masks, but got mask with dtype ${mask.dtype}`);
  if (value instanceof Tensor && value.ndim !== 0)
    throw new DTypeError(
      `maskedFill only supports a 0-dimensional value tensor, but got tensor with ${value.ndim} dimension(s)`,
    );
  const v = value instanceof Tensor ? value.item() : value;
  const shape = broadcastShapes(mask.shape, x.shape);
  if (!arraysEqual(shape, x.shape))
    throw new ShapeError(
      `maskedFill: the mask of shape [${mask.shape.join(", ")}] must broadcast to the input's shape [${x.shape.join(", ")}]`,
    );
  const out = raw.where(mask, raw.scalarTensor(v, x.dtype, x.device), x);
  return recordOp("MaskedFillBackward0", out, [x], (g) => [raw.where(mask, 0, g)]);
}

// Comparisons and logical ops: bool results, no gradient.
export const eq = (a: Tensor, b: Operand): Tensor => raw.binary("eq", a, b);
export const ne = (a: Tensor, b: Operand): Tensor => raw.binary("ne", a, b);
export const lt = (a: Tensor, b: Operand): Tensor => raw.binary("lt", a, b);
export const le = (a: Tensor, b: Operand): Tensor => raw.binary("le", a, b);
export const gt = (a: Tensor, b: Operand): Tensor => raw.binary("gt", a, b);
export const ge = (a: Tensor, b: Operand): Tensor => raw.binary("ge", a, b);
export const logicalAnd = (a: Tensor, b: Operand): Tensor => raw.binary("logicalAnd", a, b);
export const logicalOr = (a: Tensor, b: Operand): Tensor => raw.binary("logicalOr", a, b);
export const logicalNot = (x: Tensor): Tensor => raw.unary("logicalNot", x, [], "bool");
export const isnan = (x: Tensor): Tensor => raw.unary("isnan", x, [], "bool");
