/**
 * The pure-TypeScript CPU backend: the reference that defines tprpc's
 * numerics. Kernels favour clarity: strided inputs are gathered into
 * row-major number arrays first (readContig), then computed with flat loops.
 * Float reductions and matmul accumulate in float64.
 */
import { IndexError } from "../../../errors/index.js";
import type { NumArray } from "../../dtype.js";
import { isContiguous, numelOf } from "../../shape.js";
import type { AdamStepArgs, Backend, BinaryOp, ReduceOp, TensorView, UnaryOp } from "../interface.js";
import { offsets, outArray, readAt, readContig, readerOf, writerOf } from "../../access.js";
import { binaryFn, unaryFn } from "./fns.js";

function isScalarView(t: TensorView): boolean {
  return t.strides.every((s, i) => s === 0 || t.shape[i] === 1);
}

function indexValues(index: TensorView, size: number, dim: number): NumArray {
  const idx = readContig(index);
  for (let i = 0; i < idx.length; i++) {
    const v = idx[i]!;
    if (v < -size || v >= size)
      throw new IndexError(`index ${v} is out of bounds for dimension ${dim} with size ${size}`);
  }
  return idx;
}

/** (log-)softmax of the row-major values `a` (shape `shape`) along `dim`, into `o`. */
function softmaxInto(
  a: NumArray | Float64Array,
  shape: readonly number[],
  dim: number,
  log: boolean,
  o: NumArray,
): void {
  const [outer, size, inner] = around(shape, dim);
  for (let p = 0; p < outer; p++) {
    for (let q = 0; q < inner; q++) {
      const base = p * size * inner + q;
      let mx = Number.NEGATIVE_INFINITY;
      for (let k = 0; k < size; k++) mx = Math.max(mx, a[base + k * inner]!);
      if (mx === Number.NEGATIVE_INFINITY) mx = 0;
      let sum = 0;
      for (let k = 0; k < size; k++) sum += Math.exp(a[base + k * inner]! - mx);
      if (log) {
        const lse = Math.log(sum) + mx;
        for (let k = 0; k < size; k++) o[base + k * inner] = a[base + k * inner]! - lse;
      } else {
        for (let k = 0; k < size; k++) o[base + k * inner] = Math.exp(a[base + k * inner]! - mx) / sum;
      }
    }
  }
}

/** Rounding to a float view's dtype: Math.fround for float32, the identity for float64. */
function roundTo(t: TensorView): (x: number) => number {
  return t.dtype === "float32" ? Math.fround : (x) => x;
}

/** Splits a shape around `dim` into (outer, size, inner) for row-wise kernels. */
function around(shape: readonly number[], dim: number): [number, number, number] {
  let outer = 1;
  let inner = 1;
  for (let i = 0; i < dim; i++) outer *= shape[i]!;
  for (let i = dim + 1; i < shape.length; i++) inner *= shape[i]!;
  return [outer, shape[dim] ?? 1, inner];
}

export class TsBackend implements Backend {
  readonly name = "ts";

  copy(src: TensorView, dst: TensorView): void {
    const n = numelOf(src.shape);
    if (src.dtype === dst.dtype && src.storage !== dst.storage && isContiguous(dst.shape, dst.strides)) {
      // NB: the common case (contiguous results, broadcast biases): no offset table for dst, no staging array
      // NB: one typed-array type stands for all (same dtype: the same array class, bits copied as they are)
      const s = src.storage.data as Float64Array;
      const d = dst.storage.data as Float64Array;
      const o = dst.offset;
      if (isContiguous(src.shape, src.strides)) {
        d.set(s.subarray(src.offset, src.offset + n), o);
      } else {
        const so = offsets(src.shape, src.strides, src.offset);
        for (let i = 0; i < n; i++) d[o + i] = s[so[i]!]!;
      }
      return;
    }
    const so = offsets(src.shape, src.strides, src.offset);
    const dof = offsets(dst.shape, dst.strides, dst.offset);
    if (src.dtype === dst.dtype) {
      const s = src.storage.data as unknown as { [i: number]: number | bigint };
      const d = dst.storage.data as unknown as { [i: number]: number | bigint };
      // NB: copy raw elements (bits for f16/bf16, bigints for int64) so values round-trip exactly.
      const tmp = new Array<number | bigint>(n);
      for (let i = 0; i < n; i++) tmp[i] = s[so[i]!]!;
      for (let i = 0; i < n; i++) d[dof[i]!] = tmp[i]!;
      return;
    }
    const read = readerOf(src.storage);
    const write = writerOf(dst.storage);
    if (src.dtype === "int64" && dst.dtype !== "int64") {
      // fallthrough handled by the generic reader
    }
    const vals = new Float64Array(n);
    for (let i = 0; i < n; i++) vals[i] = read(so[i]!);
    for (let i = 0; i < n; i++) write(dof[i]!, vals[i]!);
  }

  fill(dst: TensorView, value: number): void {
    const d = dst.dtype;
    if (
      (d === "float32" || d === "float64" || d === "int32" || d === "uint8") &&
      isContiguous(dst.shape, dst.strides)
    ) {
      // NB: as the writer stores (the typed array converts), without a writer closure per call
      (dst.storage.data as NumArray).fill(value, dst.offset, dst.offset + numelOf(dst.shape));
      return;
    }
    const write = writerOf(dst.storage);
    const offs = offsets(dst.shape, dst.strides, dst.offset);
    for (let i = 0; i < offs.length; i++) write(offs[i]!, value);
  }

  unary(op: UnaryOp, x: TensorView, out: TensorView, args: readonly number[] = []): void {
    const f = unaryFn(op, args);
    const a = readContig(x);
    const [o, commit] = outArray(out);
    for (let i = 0; i < a.length; i++) o[i] = f(a[i]!);
    commit();
  }

  binary(op: BinaryOp, a: TensorView, b: TensorView, out: TensorView): void {
    const integral = out.dtype === "int32" || out.dtype === "int64" || out.dtype === "uint8";
    const f = binaryFn(op, integral);
    const [o, commit] = outArray(out);
    const n = o.length;
    if (isScalarView(b)) {
      const av = readContig(a);
      const bv = readAt(b.storage, b.offset);
      for (let i = 0; i < n; i++) o[i] = f(av[i]!, bv);
    } else if (isScalarView(a)) {
      const av = readAt(a.storage, a.offset);
      const bv = readContig(b);
      for (let i = 0; i < n; i++) o[i] = f(av, bv[i]!);
    } else {
      const av = readContig(a);
      const bv = readContig(b);
      for (let i = 0; i < n; i++) o[i] = f(av[i]!, bv[i]!);
    }
    commit();
  }

  where(cond: TensorView, a: TensorView, b: TensorView, out: TensorView): void {
    const c = readContig(cond);
    const av = readContig(a);
    const bv = readContig(b);
    const [o, commit] = outArray(out);
    for (let i = 0; i < o.length; i++) o[i] = c[i] ? av[i]! : bv[i]!;
    commit();
  }

  reduce(op: ReduceOp, x: TensorView, dims: readonly number[], out: TensorView): void {
    const a = readContig(x);
    // Output index of each input element: strides of `out` with 0 on reduced dims.
    const outStrides = new Array<number>(x.shape.length);
    let s = 1;
    for (let d = x.shape.length - 1; d >= 0; d--) {
      outStrides[d] = dims.includes(d) ? 0 : s;
      if (!dims.includes(d)) s *= x.shape[d]!;
    }
    const target = offsets(x.shape, outStrides, 0);
    const m = numelOf(out.shape);
    const acc = new Float64Array(m);
    if (op === "sum") {
      for (let i = 0; i < a.length; i++) acc[target[i]!] += a[i]!;
    } else if (op === "prod") {
      acc.fill(1);
      for (let i = 0; i < a.length; i++) acc[target[i]!] *= a[i]!;
    } else {
      const isMax = op === "max";
      acc.fill(isMax ? Number.NEGATIVE_INFINITY : Number.POSITIVE_INFINITY);
      for (let i = 0; i < a.length; i++) {
        const v = a[i]!;
        const t = target[i]!;
        const cur = acc[t]!;
        if (Number.isNaN(v) || (isMax ? v > cur : v < cur)) acc[t] = Number.isNaN(cur) ? cur : v;
      }
    }
    const [o, commit] = outArray(out);
    for (let i = 0; i < m; i++) o[i] = acc[i]!;
    commit();
  }

  argReduce(op: "argmax" | "argmin", x: TensorView, dim: number, out: TensorView): void {
    const a = readContig(x);
    const [outer, size, inner] = around(x.shape, dim);
    const [o, commit] = outArray(out);
    const isMax = op === "argmax";
    for (let p = 0; p < outer; p++) {
      for (let q = 0; q < inner; q++) {
        let best = 0;
        let bv = a[p * size * inner + q]!;
        for (let k = 1; k < size; k++) {
          const v = a[(p * size + k) * inner + q]!;
          if (Number.isNaN(bv)) break;
          if (Number.isNaN(v) || (isMax ? v > bv : v < bv)) {
            bv = v;
            best = k;
          }
        }
        o[p * inner + q] = best;
      }
    }
    commit();
  }

  matmul(a: TensorView, b: TensorView, out: TensorView, accumulate = false): void {
    // batch dims (any strides, broadcast ones expanded by the view) are flattened by readContig
    const r = out.shape.length;
    const [M, N, K] = [out.shape[r - 2]!, out.shape[r - 1]!, a.shape[r - 1]!];
    const B = M * N === 0 ? 0 : numelOf(out.shape) / (M * N);
    const av = readContig(a);
    const bv = readContig(b);
    const [o, commit] = outArray(out);
    const row = new Float64Array(N);
    for (let bi = 0; bi < B; bi++) {
      const aBase = bi * M * K;
      const bBase = bi * K * N;
      for (let i = 0; i < M; i++) {
        const oRow = (bi * M + i) * N;
        for (let j = 0; j < N; j++) row[j] = accumulate ? o[oRow + j]! : 0;
        for (let k = 0; k < K; k++) {
          const aik = av[aBase + i * K + k]!;
          if (aik === 0) continue;
          const bRow = bBase + k * N;
          for (let j = 0; j < N; j++) row[j] += aik * bv[bRow + j]!;
        }
        const oBase = (bi * M + i) * N;
        for (let j = 0; j < N; j++) o[oBase + j] = row[j]!;
      }
    }
    commit();
  }

  softmax(x: TensorView, dim: number, log: boolean, out: TensorView): void {
    const [o, commit] = outArray(out);
    softmaxInto(readContig(x), x.shape, dim, log, o);
    commit();
  }

  maskedSoftmax(x: TensorView, mask: TensorView, divisor: number, out: TensorView): void {
    const xv = readContig(x);
    const mv = readContig(mask);
    const r = roundTo(x);
    const S = x.shape[x.shape.length - 1]!;
    const T = x.shape[x.shape.length - 2]!;
    const d = r(divisor);
    // the composite's steps: x / divisor rounded to the dtype, masked to -inf, then softmax's row math
    const v = new Float64Array(xv.length);
    for (let i = 0; i < xv.length; i++) v[i] = mv[i % (T * S)] ? Number.NEGATIVE_INFINITY : r(xv[i]! / d);
    const [o, commit] = outArray(out);
    softmaxInto(v, x.shape, x.shape.length - 1, false, o);
    commit();
  }

  softmaxBackward(y: TensorView, g: TensorView, dim: number, log: boolean, out: TensorView): void {
    const yv = readContig(y);
    const gv = readContig(g);
    const r = roundTo(out);
    const [outer, size, inner] = around(y.shape, dim);
    const [o, commit] = outArray(out);
    for (let p = 0; p < outer; p++) {
      for (let q = 0; q < inner; q++) {
        const base = p * size * inner + q;
        let acc = 0;
        for (let k = 0; k < size; k++) {
          const i = base + k * inner;
          acc += log ? gv[i]! : r(gv[i]! * yv[i]!);
        }
        const s = r(acc);
        for (let k = 0; k < size; k++) {
          const i = base + k * inner;
          o[i] = log ? r(gv[i]! - r(r(Math.exp(yv[i]!)) * s)) : r(yv[i]! * r(gv[i]! - s));
        }
      }
    }
    commit();
  }

  indexSelect(x: TensorView, dim: number, index: TensorView, out: TensorView): void {
    const [outer, size, inner] = around(x.shape, dim);
    const idx = indexValues(index, size, dim);
    if (x.dtype === out.dtype && isContiguous(x.shape, x.strides) && isContiguous(out.shape, out.strides)) {
      // NB: the selected rows only, element for element (exact for int64; no conversion of all of x)
      const a = x.storage.data as Float64Array;
      const o = out.storage.data as Float64Array;
      const m = idx.length;
      for (let p = 0; p < outer; p++)
        for (let k = 0; k < m; k++) {
          const src = idx[k]! < 0 ? idx[k]! + size : idx[k]!;
          const sBase = x.offset + (p * size + src) * inner;
          const oBase = out.offset + (p * m + k) * inner;
          if (inner >= 32) o.set(a.subarray(sBase, sBase + inner), oBase);
          else for (let q = 0; q < inner; q++) o[oBase + q] = a[sBase + q]!;
        }
      return;
    }
    const a = readContig(x);
    const [o, commit] = outArray(out);
    const m = idx.length;
    for (let p = 0; p < outer; p++) {
      for (let k = 0; k < m; k++) {
        const src = idx[k]! < 0 ? idx[k]! + size : idx[k]!;
        const sBase = (p * size + src) * inner;
        const oBase = (p * m + k) * inner;
        for (let q = 0; q < inner; q++) o[oBase + q] = a[sBase + q]!;
      }
    }
    commit();
  }

  gather(x: TensorView, dim: number, index: TensorView, out: TensorView): void {
    const size = x.shape[dim]!;
    const idx = indexValues(index, size, dim);
    // Storage offset of x at (i with i[dim] replaced by 0), for every position of index.
    const xStrides = index.shape.map((_, d) => (d === dim ? 0 : x.strides[d]!));
    const base = offsets(index.shape, xStrides, x.offset);
    const read = readerOf(x.storage);
    const [o, commit] = outArray(out);
    const sd = x.strides[dim]!;
    for (let i = 0; i < idx.length; i++) {
      const k = idx[i]! < 0 ? idx[i]! + size : idx[i]!;
      o[i] = read(base[i]! + k * sd);
    }
    commit();
  }

  scatterAdd(dst: TensorView, dim: number, index: TensorView, src: TensorView): void {
    const size = dst.shape[dim]!;
    const idx = indexValues(index, size, dim);
    const dStrides = index.shape.map((_, d) => (d === dim ? 0 : dst.strides[d]!));
    const base = offsets(index.shape, dStrides, dst.offset);
    const srcOffs = offsets(index.shape, src.strides.slice(0, index.shape.length), src.offset);
    const readS = readerOf(src.storage);
    const readD = readerOf(dst.storage);
    const writeD = writerOf(dst.storage);
    const sd = dst.strides[dim]!;
    for (let i = 0; i < idx.length; i++) {
      const k = idx[i]! < 0 ? idx[i]! + size : idx[i]!;
      const t = base[i]! + k * sd;
      writeD(t, readD(t) + readS(srcOffs[i]!));
    }
  }

  layerNorm(
    x: TensorView,
    weight: TensorView | null,
    bias: TensorView | null,
    eps: number,
    out: TensorView,
    mean: TensorView,
    rstd: TensorView,
  ): void {
    const a = readContig(x);
    const D = x.shape[x.shape.length - 1]!;
    const rows = D === 0 ? 0 : a.length / D;
    const w = weight ? readContig(weight) : null;
    const b = bias ? readContig(bias) : null;
    const [o, commit] = outArray(out);
    const m = mean.storage.data as NumArray;
    const r = rstd.storage.data as NumArray;
    for (let i = 0; i < rows; i++) {
      const base = i * D;
      let mu = 0;
      for (let j = 0; j < D; j++) mu += a[base + j]!;
      mu /= D;
      let v = 0;
      for (let j = 0; j < D; j++) v += (a[base + j]! - mu) ** 2;
      const rs = 1 / Math.sqrt(v / D + eps);
      m[mean.offset + i] = mu;
      r[rstd.offset + i] = rs;
      for (let j = 0; j < D; j++) {
        let y = (a[base + j]! - mu) * rs;
        if (w) y *= w[j]!;
        if (b) y += b[j]!;
        o[base + j] = y;
      }
    }
    commit();
  }

  layerNormBackward(
    g: TensorView,
    x: TensorView,
    mean: TensorView,
    rstd: TensorView,
    weight: TensorView | null,
    gx: TensorView | null,
    gw: TensorView | null,
    gb: TensorView | null,
  ): void {
    const D = x.shape[x.shape.length - 1]!;
    const gv = readContig(g);
    const xv = readContig(x);
    const rows = D === 0 ? 0 : xv.length / D;
    const mu = readContig(mean);
    const rs = readContig(rstd);
    const w = weight ? readContig(weight) : null;
    const r = roundTo(x);
    const accW = new Float64Array(D);
    const accB = new Float64Array(D);
    const xhat = new Float64Array(D);
    const [gxo, commitX] = gx ? outArray(gx) : [null, () => {}];
    for (let i = 0; i < rows; i++) {
      const base = i * D;
      let s1 = 0;
      let s2 = 0;
      for (let j = 0; j < D; j++) {
        const xh = r(r(xv[base + j]! - mu[i]!) * rs[i]!);
        xhat[j] = xh;
        const gh = w ? r(gv[base + j]! * w[j]!) : gv[base + j]!;
        s1 += gh;
        s2 += r(gh * xh);
        accW[j] += r(gv[base + j]! * xh);
        accB[j] += gv[base + j]!;
      }
      if (gxo) {
        // NB: the sums are rounded to the dtype before the division, as float reductions are
        const m1 = r(r(s1) / D);
        const m2 = r(r(s2) / D);
        for (let j = 0; j < D; j++) {
          const gh = w ? r(gv[base + j]! * w[j]!) : gv[base + j]!;
          gxo[base + j] = r(r(r(gh - m1) - r(xhat[j]! * m2)) * rs[i]!);
        }
      }
    }
    commitX();
    for (const [t, acc] of [
      [gw, accW],
      [gb, accB],
    ] as const) {
      if (!t) continue;
      const [o, commit] = outArray(t);
      for (let j = 0; j < D; j++) o[j] = acc[j]!;
      commit();
    }
  }

  adamStep(
    p: TensorView,
    grad: TensorView,
    expAvg: TensorView,
    expAvgSq: TensorView,
    maxExpAvgSq: TensorView | null,
    h: AdamStepArgs,
  ): void {
    const r = roundTo(p);
    const pv = p.storage.data as NumArray;
    const gv = grad.storage.data as NumArray;
    const mv = expAvg.storage.data as NumArray;
    const vv = expAvgSq.storage.data as NumArray;
    const xv = maxExpAvgSq ? (maxExpAvgSq.storage.data as NumArray) : null;
    const [decay, l2, b1, omb1, b2, omb2, bc2, eps, step] = [
      h.decay,
      h.l2,
      h.beta1,
      h.oneMinusBeta1,
      h.beta2,
      h.oneMinusBeta2,
      h.bc2Sqrt,
      h.eps,
      h.negStepSize,
    ].map(r) as [number, number, number, number, number, number, number, number, number];
    const n = numelOf(p.shape);
    // one line per op of the composite (sdk/optim/adam.ts), each rounded to the dtype
    for (let i = 0; i < n; i++) {
      let g = gv[grad.offset + i]!;
      if (h.maximize) g = -g;
      let pi = pv[p.offset + i]!;
      if (h.decay !== 1) pi = r(pi * decay);
      if (h.l2 !== 0) g = r(g + r(pi * l2));
      const m = r(r(mv[expAvg.offset + i]! * b1) + r(g * omb1));
      const v = r(r(vv[expAvgSq.offset + i]! * b2) + r(r(g * g) * omb2));
      mv[expAvg.offset + i] = m;
      vv[expAvgSq.offset + i] = v;
      let second = v;
      if (xv) {
        const cur = xv[maxExpAvgSq!.offset + i]!;
        second = Number.isNaN(cur) || Number.isNaN(v) ? Number.NaN : cur > v ? cur : v;
        xv[maxExpAvgSq!.offset + i] = second;
      }
      const denom = r(r(r(Math.sqrt(second)) / bc2) + eps);
      pv[p.offset + i] = r(pi + r(r(m / denom) * step));
    }
  }
}
