/**
 * Indexing ops with their gradient rules: indexSelect, gather, scatterAdd,
 * embedding lookup, and (log-)softmax, whose backward needs only its output.
 */
import { DTypeError } from "../../errors/index.js";
import { getBackend } from "../../tensor/backend/registry.js";
import * as raw from "../../tensor/raw.js";
import { contiguousStrides, normDim } from "../../tensor/shape.js";
import type { Tensor } from "../../tensor/tensor.js";
import { recordOp } from "../function.js";

export function indexSelect(x: Tensor, dim: number, index: Tensor): Tensor {
  const out = raw.indexSelect(x, dim, index);
  const d = normDim(dim, x.ndim);
  return recordOp(
    "IndexSelectBackward0",
    out,
    [x],
    (g) => {
      // index_add: broadcast the 1-D index along the other dims and scatter-add
      const ishape = g.shape.map((_, i) => (i === d ? index.numel() : 1));
      const idx = raw.expandTo(
        raw.asStrided(raw.contiguous(index), ishape, contiguousStrides(ishape), raw.contiguous(index).offset),
        g.shape,
      );
      return [raw.scatterAdd(raw.empty(x.shape, g.dtype, g.device), d, idx, g)];
    },
    [index],
  );
}

export function gather(x: Tensor, dim: number, index: Tensor): Tensor {
  const out = raw.gather(x, dim, index);
  return recordOp(
    "GatherBackward0",
    out,
    [x],
    (g) => [raw.scatterAdd(raw.empty(x.shape, g.dtype, g.device), dim, index, g)],
    [index],
  );
}

/** Out of place: x with src added at index along dim. */
export function scatterAdd(x: Tensor, dim: number, index: Tensor, src: Tensor): Tensor {
  const out = raw.scatterAdd(x, dim, index, src);
  return recordOp(
    "ScatterAddBackward0",
    out,
    [x, null, src],
    (g, needs) => [g, null, needs[2] ? raw.gather(g, dim, index) : null],
    [index],
  );
}

/**
 * Rows of `weight` picked by integer `input` (any shape): out is
 * [...input.shape, embeddingDim]. Rows at paddingIdx get no gradient.
 */
export function embedding(input: Tensor, weight: Tensor, paddingIdx?: number): Tensor {
  if (input.dtype !== "int64" && input.dtype !== "int32")
    throw new DTypeError(
      `Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got ${input.dtype} instead (while checking arguments for embedding)`,
    );
  const flat = raw.contiguous(input);
  const idx = raw.asStrided(flat, [input.numel()], [1], flat.offset);
  const rows = raw.indexSelect(weight, 0, idx);
  const d = weight.shape[1]!;
  const shape = [...input.shape, d];
  const out = raw.asStrided(rows, shape, contiguousStrides(shape), 0);
  const n = weight.shape[0]!;
  const pad = paddingIdx === undefined ? undefined : paddingIdx < 0 ? paddingIdx + n : paddingIdx;
  return recordOp(
    "EmbeddingBackward0",
    out,
    [null, weight],
    (g) => {
      const g2 = raw.contiguous(g);
      const src = raw.asStrided(g2, [input.numel(), d], [d, 1], g2.offset);
      const full = raw.expandTo(raw.asStrided(idx, [input.numel(), 1], [1, 0], idx.offset), [input.numel(), d]);
      const gw = raw.scatterAdd(raw.empty(weight.shape, g.dtype, g.device), 0, full, src);
      if (pad !== undefined) {
        raw.copyInto(raw.asStrided(gw, [d], [1], pad * d), 0);
      }
      return [null, gw];
    },
    [idx],
  );
}

export function softmax(x: Tensor, dim: number): Tensor {
  const d = normDim(dim, x.ndim);
  const out = raw.softmax(x, d, false);
  return recordOp("SoftmaxBackward0", out, [x], (g) => [raw.softmaxBackward(out, g, d, false)], [out]);
}

/**
 * Attention's weights softmax(where(mask, -inf, x / divisor)) along the last dim, as one node: the
 * same numbers as div, maskedFill and softmax, with one tensor saved and one allocated each way.
 * The backward is softmax's, divided by the divisor (masked positions have y = 0, so gradient 0).
 */
export function maskedSoftmax(x: Tensor, mask: Tensor, divisor: number): Tensor {
  const out = raw.maskedSoftmax(x, mask, divisor);
  return recordOp(
    "MaskedSoftmaxBackward",
    out,
    [x],
    (g) => {
      const gx = raw.softmaxBackward(out, g, out.ndim - 1, false);
      // NB: divided in place (gx is fresh; an elementwise out may alias an input)
      getBackend().binary("div", gx, raw.expandTo(raw.scalarTensor(divisor, gx.dtype, gx.device), gx.shape), gx);
      return [gx];
    },
    [out],
  );
}

export function logSoftmax(x: Tensor, dim: number): Tensor {
  const d = normDim(dim, x.ndim);
  const out = raw.softmax(x, d, true);
  return recordOp("LogSoftmaxBackward0", out, [x], (g) => [raw.softmaxBackward(out, g, d, true)], [out]);
}
