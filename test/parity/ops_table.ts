/**
 * What every op name in test/fixtures/ops.json means in tprpc: one line per op,
 * taking the decoded fixture arguments and kwargs (named as tprpc names them)
 * and returning the op's output, or its outputs as a list for ops that return
 * several (max/min over a dim -> [values, indices]; split; chunk).
 *
 * An op missing here fails its fixture cases (never skips them), so a gap
 * between the fixtures and the harness is visible.
 */
import { cat, nn, stack, type Tensor, where } from "../../sdk/index.js";
import type { Arg } from "./fixtures.js";

export type Kwargs = Record<string, unknown>;
export type OpFn = (args: Arg[], kw: Kwargs) => Tensor | Tensor[];

const F = nn.functional;

function isTensor(a: unknown): a is Tensor {
  return typeof a === "object" && a !== null && !Array.isArray(a) && "shape" in a && "dtype" in a;
}
/** The argument as a Tensor (throws a clear error on a malformed fixture). */
function t(a: Arg | undefined): Tensor {
  if (!isTensor(a)) throw new Error(`fixture argument ${JSON.stringify(a)} is not a tensor`);
  return a;
}
function num(a: unknown): number {
  if (typeof a !== "number") throw new Error(`fixture argument ${JSON.stringify(a)} is not a number`);
  return a;
}
function ints(a: unknown): number[] {
  if (!Array.isArray(a) || !a.every((x) => typeof x === "number"))
    throw new Error(`fixture argument ${JSON.stringify(a)} is not a list of ints`);
  return a as number[];
}
function tensors(a: Arg | undefined): Tensor[] {
  if (!Array.isArray(a)) throw new Error("fixture argument is not a tensor list");
  return a.map(t);
}
/** A tensor or a scalar operand of a binary op. */
function operand(a: Arg | undefined): Tensor | number {
  return typeof a === "number" ? a : t(a);
}
/** dims as the fixture gives them: one int, a list of ints, or absent. */
function dims(a: unknown): number | number[] | undefined {
  if (a === undefined || a === null) return undefined;
  return typeof a === "number" ? a : ints(a);
}
function keepdim(kw: Kwargs): boolean {
  return kw.keepdim === true;
}
/** A {values, indices} result as the fixture's [values, indices]. */
function pair(r: { values: Tensor; indices: Tensor }): Tensor[] {
  return [r.values, r.indices];
}
/** The kwargs present in the fixture (so tprpc's defaults apply to the rest). */
function pick(kw: Kwargs, names: string[]): Kwargs {
  const out: Kwargs = {};
  for (const n of names) if (kw[n] !== undefined && kw[n] !== null) out[n] = kw[n];
  return out;
}

export const OPS: Record<string, OpFn> = {
  // elementwise
  add: ([a, b]) => t(a).add(operand(b)),
  sub: ([a, b]) => t(a).sub(operand(b)),
  mul: ([a, b]) => t(a).mul(operand(b)),
  div: ([a, b]) => t(a).div(operand(b)),
  pow: ([a, b]) => t(a).pow(operand(b)),
  neg: ([a]) => t(a).neg(),
  exp: ([a]) => t(a).exp(),
  log: ([a]) => t(a).log(),
  sqrt: ([a]) => t(a).sqrt(),
  abs: ([a]) => t(a).abs(),
  tanh: ([a]) => t(a).tanh(),
  sigmoid: ([a]) => t(a).sigmoid(),
  relu: ([a]) => t(a).relu(),
  gelu: ([a], kw) => F.gelu(t(a), { approximate: (kw.approximate as "none" | "tanh" | undefined) ?? "none" }),
  clamp: ([a], kw) => t(a).clamp((kw.min as number | null) ?? undefined, (kw.max as number | null) ?? undefined),
  where: ([c, a, b]) => where(t(c), operand(a), operand(b)),
  eq: ([a, b]) => t(a).eq(operand(b)),
  ne: ([a, b]) => t(a).ne(operand(b)),
  lt: ([a, b]) => t(a).lt(operand(b)),
  le: ([a, b]) => t(a).le(operand(b)),
  gt: ([a, b]) => t(a).gt(operand(b)),
  ge: ([a, b]) => t(a).ge(operand(b)),
  maximum: ([a, b]) => t(a).maximum(t(b)),
  minimum: ([a, b]) => t(a).minimum(t(b)),
  // reductions
  sum: ([a], kw) => (kw.dim === undefined ? t(a).sum() : t(a).sum(dims(kw.dim), keepdim(kw))),
  mean: ([a], kw) => (kw.dim === undefined ? t(a).mean() : t(a).mean(dims(kw.dim), keepdim(kw))),
  max: ([a], kw) => (kw.dim === undefined ? t(a).max() : pair(t(a).max(num(kw.dim), keepdim(kw)))),
  min: ([a], kw) => (kw.dim === undefined ? t(a).min() : pair(t(a).min(num(kw.dim), keepdim(kw)))),
  argmax: ([a], kw) => (kw.dim === undefined ? t(a).argmax() : t(a).argmax(num(kw.dim), keepdim(kw))),
  logsumexp: ([a], kw) => t(a).logsumexp(dims(kw.dim)!, keepdim(kw)),
  prod: ([a], kw) => (kw.dim === undefined ? t(a).prod() : t(a).prod(num(kw.dim), keepdim(kw))),
  // linear algebra
  matmul: ([a, b]) => t(a).matmul(t(b)),
  bmm: ([a, b]) => t(a).bmm(t(b)),
  softmax: ([a], kw) => t(a).softmax(num(kw.dim)),
  logSoftmax: ([a], kw) => t(a).logSoftmax(num(kw.dim)),
  // indexing
  indexSelect: ([a, d, i]) => t(a).indexSelect(num(d), t(i)),
  gather: ([a, d, i]) => t(a).gather(num(d), t(i)),
  scatterAdd: ([a, d, i, s]) => t(a).scatterAdd(num(d), t(i), t(s)),
  embedding: ([i, w]) => F.embedding(t(i), t(w)),
  maskedFill: ([a, m, v]) => t(a).maskedFill(t(m), num(v)),
  // joining, splitting, views
  cat: ([ts], kw) => cat(tensors(ts), (kw.dim as number | undefined) ?? 0),
  stack: ([ts], kw) => stack(tensors(ts), (kw.dim as number | undefined) ?? 0),
  split: ([a, s], kw) => t(a).split(typeof s === "number" ? s : ints(s), (kw.dim as number | undefined) ?? 0),
  chunk: ([a, n], kw) => t(a).chunk(num(n), (kw.dim as number | undefined) ?? 0),
  narrow: ([a, d, s, l]) => t(a).narrow(num(d), num(s), num(l)),
  transpose: ([a, d0, d1]) => t(a).transpose(num(d0), num(d1)),
  permute: ([a, p]) => t(a).permute(ints(p)),
  reshape: ([a, s]) => t(a).reshape(ints(s)),
  view: ([a, s]) => t(a).view(ints(s)),
  expand: ([a, s]) => t(a).expand(ints(s)),
  squeeze: ([a], kw) => (kw.dim === undefined ? t(a).squeeze() : t(a).squeeze(num(kw.dim))),
  unsqueeze: ([a, d]) => t(a).unsqueeze(num(d)),
  contiguous: ([a]) => t(a).contiguous(),
  // nn.functional
  layerNorm: ([x, w, b], kw) =>
    F.layerNorm(
      t(x),
      ints(kw.normalizedShape),
      w === null ? undefined : t(w),
      b === null ? undefined : t(b),
      (kw.eps as number | undefined) ?? 1e-5,
    ),
  linear: ([x, w, b]) => (b === undefined ? F.linear(t(x), t(w)) : F.linear(t(x), t(w), t(b))),
  dropout: ([x, p, training]) => F.dropout(t(x), num(p), training === true),
  crossEntropy: ([x, y], kw) => F.crossEntropy(t(x), t(y), pick(kw, ["ignoreIndex", "reduction", "labelSmoothing"])),
  mseLoss: ([a, b], kw) => F.mseLoss(t(a), t(b), pick(kw, ["reduction"])),
};
