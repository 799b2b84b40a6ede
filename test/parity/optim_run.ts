/**
 * The optimizer and gradient-clipping cases of test/fixtures/optim.json, run
 * per CPU backend by ./optim.test.ts and on the emulated CUDA device by
 * test/cuda/parity_emulated.test.ts: from PyTorch's starting parameters, step()
 * calls (three to six) with the recorded gradients leave the parameters
 * PyTorch had after each step;
 * clipGradNorm returns PyTorch's total norm and scales the gradients alike.
 *
 * Hyperparameters are recorded under torch's names and mapped here to tprpc's.
 */
import { expect } from "vitest";
import { optim, type Tensor } from "../../sdk/index.js";
import { decodeTensor, type EncodedTensor, expectClose, loadFixture } from "./fixtures.js";

export interface OptimCase {
  name: string;
  optimizer?: string;
  hparams?: Record<string, unknown>;
  params?: EncodedTensor[];
  steps?: { grads: EncodedTensor[]; params: EncodedTensor[] }[];
  clip?: string;
  maxNorm?: number;
  normType?: number | "inf";
  grads?: EncodedTensor[];
  totalNorm?: EncodedTensor;
  gradsAfter?: EncodedTensor[];
}

export const OPTIM_CASES = loadFixture<OptimCase>("optim.json").cases;

/** torch hyperparameter name -> tprpc option name. */
const HPARAM_NAMES: Record<string, string> = {
  lr: "lr",
  momentum: "momentum",
  dampening: "dampening",
  weight_decay: "weightDecay",
  nesterov: "nesterov",
  betas: "betas",
  eps: "eps",
  amsgrad: "amsgrad",
  lr_decay: "lrDecay",
  initial_accumulator_value: "initialAccumulatorValue",
  alpha: "alpha",
  centered: "centered",
  maximize: "maximize",
  rho: "rho",
  etas: "etas",
  step_sizes: "stepSizes",
};

interface OptimizerLike {
  step(): unknown;
}
type OptimizerCtor = new (params: Tensor[], options: Record<string, unknown>) => OptimizerLike;

export const OPTIMIZERS: Record<string, () => OptimizerCtor> = {
  SGD: () => optim.SGD as unknown as OptimizerCtor,
  Adam: () => optim.Adam as unknown as OptimizerCtor,
  AdamW: () => optim.AdamW as unknown as OptimizerCtor,
  Adagrad: () => optim.Adagrad as unknown as OptimizerCtor,
  RMSprop: () => optim.RMSprop as unknown as OptimizerCtor,
  Adadelta: () => optim.Adadelta as unknown as OptimizerCtor,
  Adamax: () => optim.Adamax as unknown as OptimizerCtor,
  Rprop: () => optim.Rprop as unknown as OptimizerCtor,
};

function options(hparams: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(hparams)) {
    const name = HPARAM_NAMES[k];
    if (!name) throw new Error(`the parity harness cannot map torch hyperparameter "${k}": add it to HPARAM_NAMES`);
    out[name] = v;
  }
  return out;
}

export function runOptimizerCase(c: OptimCase): void {
  const make = OPTIMIZERS[c.optimizer!];
  if (!make) throw new Error(`the parity harness has no entry for optimizer "${c.optimizer}"`);
  const params = c.params!.map((p) => decodeTensor(p, true));
  const opt = new (make())(params, options(c.hparams!));
  c.steps!.forEach((s, k) => {
    params.forEach((p, i) => {
      p.grad = decodeTensor(s.grads[i]!);
    });
    opt.step();
    for (const [i, p] of params.entries()) expectClose(p, s.params[i]!, `step ${k + 1}: params[${i}]`);
  });
}

export function runClipCase(c: OptimCase): void {
  if (c.clip !== "clipGradNorm") throw new Error(`the parity harness has no entry for "${c.clip}"`);
  const params = c.grads!.map((g) => {
    const p = decodeTensor(g, true);
    p.grad = decodeTensor(g);
    return p;
  });
  const normType = c.normType === "inf" ? Number.POSITIVE_INFINITY : c.normType!;
  const total: unknown = optim.clipGradNorm(params, c.maxNorm!, normType);
  if (typeof total === "number") expect(total).toBeCloseTo(c.totalNorm!.data[0] as number, 4);
  else expectClose(total as Tensor, c.totalNorm!, "totalNorm");
  for (const [i, p] of params.entries()) expectClose(p.grad, c.gradsAfter![i]!, `gradsAfter[${i}]`);
}
