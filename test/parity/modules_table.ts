/**
 * How to build each module and loss named in test/fixtures/{modules,losses,
 * gpt_block}.json from its fixture constructor arguments (tprpc names), and a
 * runner shared by the module suites: load the recorded state dict, run
 * forward, backward (out * gradOut).sum(), compare output, input gradients
 * and parameter gradients with PyTorch's.
 *
 * A module or loss missing here fails its cases (never skips them).
 */
import { expect } from "vitest";
import { nn, type Tensor } from "../../sdk/index.js";
import {
  decodeArg,
  decodeTensor,
  type EncodedArg,
  type EncodedTensor,
  expectClose,
  FLOAT32,
  gradOrZeros,
  testDevice,
  type Tolerance,
} from "./fixtures.js";

export type Ctor = Record<string, unknown>;
interface Layer {
  module: string;
  ctor: Ctor;
}
/** The part of a tprpc module the harness uses. */
export interface ModuleLike {
  forward(...args: Tensor[]): Tensor;
  loadStateDict(state: Record<string, Tensor>): unknown;
  namedParameters(): Iterable<[string, Tensor]>;
}

export const MODULES: Record<string, (c: Ctor) => nn.TensorModule> = {
  Linear: (c) => new nn.Linear(c.inFeatures as number, c.outFeatures as number, { bias: c.bias !== false }),
  Embedding: (c) => new nn.Embedding(c.numEmbeddings as number, c.embeddingDim as number),
  LayerNorm: (c) =>
    new nn.LayerNorm(c.normalizedShape as number[], {
      eps: (c.eps as number | undefined) ?? 1e-5,
      elementwiseAffine: c.elementwiseAffine !== false,
    }),
  ReLU: () => new nn.ReLU(),
  GELU: (c) => new nn.GELU({ approximate: (c.approximate as "none" | "tanh" | undefined) ?? "none" }),
  Tanh: () => new nn.Tanh(),
  Sequential: (c) => new nn.Sequential(...(c.layers as Layer[]).map((l) => buildModule(l.module, l.ctor))),
  TransformerBlock: (c) => new nn.TransformerBlock(c as unknown as nn.BlockConfig),
  CausalSelfAttention: (c) => new nn.CausalSelfAttention(c as unknown as nn.BlockConfig),
};

export const LOSSES: Record<string, (c: Ctor) => ModuleLike> = {
  MSELoss: (c) => new nn.MSELoss(c),
  CrossEntropyLoss: (c) => new nn.CrossEntropyLoss(c),
};

export function buildModule(kind: string, ctor: Ctor): nn.TensorModule {
  const make = MODULES[kind];
  if (!make)
    throw new Error(`the parity harness has no entry for module "${kind}": add it to test/parity/modules_table.ts`);
  return make(ctor);
}

export function buildLoss(kind: string, ctor: Ctor): ModuleLike {
  const make = LOSSES[kind];
  if (!make)
    throw new Error(`the parity harness has no entry for loss "${kind}": add it to test/parity/modules_table.ts`);
  return make(ctor);
}

export interface ModuleCase {
  name: string;
  module: string;
  ctor?: Ctor;
  config?: Ctor;
  stateDict: Record<string, EncodedTensor>;
  args: EncodedArg[];
  out: EncodedTensor;
  gradOut: EncodedTensor | null;
  grads: (EncodedTensor | null)[];
  paramGrads: Record<string, EncodedTensor | null>;
}

export interface LossCase {
  name: string;
  loss: string;
  ctor: Ctor;
  args: EncodedArg[];
  out: EncodedTensor;
  gradOut: EncodedTensor | null;
  grads: (EncodedTensor | null)[];
}

/** Forward with decoded args, backward with the recorded upstream gradient, compare out and input grads. */
function forwardBackward(
  m: ModuleLike,
  c: { args: EncodedArg[]; out: EncodedTensor; gradOut: EncodedTensor | null; grads: (EncodedTensor | null)[] },
  tol: Tolerance,
): void {
  const bases: Tensor[] = [];
  const args = c.args.map((a) => decodeArg(a, bases)) as Tensor[];
  const out = m.forward(...args);
  expectClose(out, c.out, "out", tol);
  if (c.gradOut === null) return;
  out.backward(decodeTensor(c.gradOut));
  c.grads.forEach((g, i) => {
    if (g !== null) expectClose(gradOrZeros(bases[i]!), g, `grads[${i}]`, tol);
  });
}

export function runModuleCase(c: ModuleCase, tol: Tolerance = FLOAT32): void {
  const m: ModuleLike = buildModule(c.module, c.config ?? c.ctor ?? {});
  const d = testDevice();
  if (d !== undefined) (m as unknown as { to(d: string): unknown }).to(d);
  const state: Record<string, Tensor> = {};
  for (const [k, v] of Object.entries(c.stateDict)) state[k] = decodeTensor(v);
  m.loadStateDict(state);
  const params = new Map(m.namedParameters());
  expect([...params.keys()].sort(), "parameter names").toEqual(Object.keys(c.paramGrads).sort());
  forwardBackward(m, c, tol);
  for (const [k, g] of Object.entries(c.paramGrads)) {
    if (g !== null) expectClose(params.get(k)!.grad, g, `paramGrads["${k}"]`, tol);
  }
}

export function runLossCase(c: LossCase, tol: Tolerance = FLOAT32): void {
  forwardBackward(buildLoss(c.loss, c.ctor), c, tol);
}
