/**
 * One op case of test/fixtures/ops.json: the output and the gradients of
 * sum_i (out_i * gradOut_i).sum() with respect to each input (taken at the
 * input's contiguous base, so view inputs check their view's backward too)
 * match PyTorch's to float32 tolerance. Run per CPU backend by ./ops.test.ts
 * and on the emulated CUDA device by test/cuda/parity_emulated.test.ts.
 */
import { expect } from "vitest";
import type { Tensor } from "../../sdk/index.js";
import {
  type Arg,
  decodeArg,
  decodeTensor,
  type EncodedArg,
  type EncodedTensor,
  expectClose,
  FLOAT32,
  gradOrZeros,
  loadFixture,
  type Tolerance,
} from "./fixtures.js";
import { type Kwargs, OPS } from "./ops_table.js";

export interface OpCase {
  name: string;
  op: string;
  args: EncodedArg[];
  kwargs: Kwargs;
  out: EncodedTensor | EncodedTensor[];
  gradOut: EncodedTensor | (EncodedTensor | null)[] | null;
  grads: (EncodedTensor | null)[];
}

export const { cases: OP_CASES } = loadFixture<OpCase>("ops.json");

/** Cases that sum many float32 terms, where summation order shows. */
function tolerance(c: OpCase): Tolerance {
  return c.name.includes("big") ? { rtol: 1e-3, atol: 1e-4 } : FLOAT32;
}

export function runOpCase(c: OpCase): void {
  const fn = OPS[c.op];
  if (!fn) throw new Error(`the parity harness has no entry for op "${c.op}": add it to test/parity/ops_table.ts`);
  const tol = tolerance(c);
  const bases: Tensor[] = [];
  const args = c.args.map((a) => decodeArg(a, bases)) as Arg[];
  const result = fn(args, c.kwargs);
  const multi = Array.isArray(c.out);
  const outs = multi ? (result as Tensor[]) : [result as Tensor];
  const wants = multi ? (c.out as EncodedTensor[]) : [c.out as EncodedTensor];
  expect(outs.length, "number of outputs").toBe(wants.length);
  for (const [i, o] of outs.entries()) expectClose(o, wants[i]!, multi ? `out[${i}]` : "out", tol);
  const gradOuts = multi ? ((c.gradOut ?? []) as (EncodedTensor | null)[]) : [c.gradOut as EncodedTensor | null];
  for (const [i, o] of outs.entries())
    expect(o.requiresGrad, `out[${i}].requiresGrad`).toBe(gradOuts[i] !== null && gradOuts[i] !== undefined);
  if (c.gradOut === null) return;

  if (!multi) {
    outs[0]!.backward(decodeTensor(c.gradOut as EncodedTensor));
  } else {
    let loss: Tensor | null = null;
    (c.gradOut as (EncodedTensor | null)[]).forEach((g, i) => {
      if (g === null) return;
      const term = outs[i]!.mul(decodeTensor(g)).sum();
      loss = loss === null ? term : loss.add(term);
    });
    (loss as Tensor | null)?.backward();
  }
  c.grads.forEach((g, i) => {
    if (g !== null) expectClose(gradOrZeros(bases[i]!), g, `grads[${i}]`, tol);
  });
}
