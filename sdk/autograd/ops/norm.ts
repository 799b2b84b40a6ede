/**
 * Layer normalisation as one op: the forward runs the backend's fused kernel
 * (mean and 1/std saved per row), the backward another (layerNormBackward),
 * the closed form
 *
 *   x̂ = (x − μ)·r,  gŵ = g·w,
 *   dx = r · (gŵ − mean(gŵ) − x̂ · mean(gŵ · x̂)),  dw = Σ g·x̂,  db = Σ g
 *
 * with means over the normalised elements and sums over the rows. Callers
 * (nn.functional.layerNorm) check shapes first.
 */
import { getBackend } from "../../tensor/backend/registry.js";
import * as raw from "../../tensor/raw.js";
import { contiguousStrides } from "../../tensor/shape.js";
import type { Tensor } from "../../tensor/tensor.js";
import { recordOp } from "../function.js";

function rowsView(t: Tensor, rows: number, d: number): Tensor {
  return raw.asStrided(t, [rows, d], [d, 1], t.offset);
}

/**
 * A gradient the kernel wrote, in `like`'s dtype and shape. NB: a module-level function, not a
 * closure made in each backward: V8 drops a closure's optimized code at full GCs once its instances
 * are dead, and this one was compiled again every few steps.
 */
function shaped(t: Tensor | null, like: Tensor): Tensor | null {
  return t && raw.asStrided(raw.cast(t, like.dtype), like.shape, contiguousStrides(like.shape), 0);
}

/** Normalises over the trailing `normalizedNumel` elements of x (weight/bias have that many elements). */
export function layerNorm(
  x: Tensor,
  normalizedNumel: number,
  weight: Tensor | null,
  bias: Tensor | null,
  eps: number,
): Tensor {
  const d = normalizedNumel;
  const rows = d === 0 ? 0 : x.numel() / d;
  const xc = raw.contiguous(x);
  const x2 = rowsView(xc, rows, d);
  const flat = (t: Tensor | null) => (t ? rowsView(raw.cast(raw.contiguous(t), x.dtype), 1, d) : null);
  const w = flat(weight);
  const b = flat(bias);
  const out = raw.output([rows, d], x.dtype, x.device);
  const mean = raw.output([rows, 1], x.dtype, x.device);
  const rstd = raw.output([rows, 1], x.dtype, x.device);
  getBackend().layerNorm(
    x2,
    w && raw.asStrided(w, [d], [1], w.offset),
    b && raw.asStrided(b, [d], [1], b.offset),
    eps,
    out,
    mean,
    rstd,
  );
  const y = raw.asStrided(out, x.shape, contiguousStrides(x.shape), 0);
  return recordOp(
    "NativeLayerNormBackward0",
    y,
    [x, weight, bias],
    (g, needs) => {
      // one fused kernel (Backend.layerNormBackward) for the three gradients
      const g2 = rowsView(raw.cast(raw.contiguous(g), x.dtype), rows, d);
      // NB: uninitialised: the kernels write every element of each output they are given
      const gx = needs[0] ? raw.output([rows, d], x.dtype, x.device) : null;
      const gw = needs[1] && weight ? raw.output([d], x.dtype, x.device) : null;
      const gb = needs[2] && bias ? raw.output([d], x.dtype, x.device) : null;
      getBackend().layerNormBackward(
        g2,
        x2,
        raw.asStrided(mean, [rows], [1], 0),
        raw.asStrided(rstd, [rows], [1], 0),
        w && raw.asStrided(w, [d], [1], w.offset),
        gx,
        gw,
        gb,
      );
      return [gx && shaped(gx, x), weight && shaped(gw, weight), bias && shaped(gb, bias)];
    },
    [x, ...(weight ? [weight] : [])],
  );
}
