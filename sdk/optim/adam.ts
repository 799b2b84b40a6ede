/**
 * Adam (Kingma & Ba) with optional AMSGrad and L2 weight decay:
 * torch.optim.Adam (1.13, single-tensor path), operation for operation. Per
 * parameter, at step t, with g its gradient:
 *
 *   g = maximize ? -g : g;   if weightDecay: g = g + weightDecay * p
 *   m = m * beta1 + (1 - beta1) * g;   v = v * beta2 + (1 - beta2) * g * g
 *   stepSize = lr / (1 - beta1^t)
 *   denom = sqrt(amsgrad ? vmax = max(vmax, v) : v) / sqrt(1 - beta2^t) + eps
 *   p -= stepSize * m / denom
 *
 * `adamUpdate` (everything after weight decay) is shared with AdamW.
 *
 *   const opt = new optim.Adam(params, { lr: 1e-3 });
 */
import type { Tensor } from "../tensor/tensor.js";
import { Optimizer, type ParamGroup, type ParamState, type ParamsInput, nextStep, stateBuffer } from "./optimizer.js";
import { checkBetas, checkFlag, checkNonNegative } from "./validate.js";

export interface AdamOptions {
  lr: number;
  /** Decay rates of the first and second moment averages. */
  betas: [number, number];
  eps: number;
  weightDecay: number;
  amsgrad: boolean;
  maximize: boolean;
}

export function checkAdamOptions(h: Partial<AdamOptions>): void {
  checkNonNegative(h.lr, "learning rate");
  checkNonNegative(h.eps, "epsilon value");
  checkBetas(h.betas);
  checkNonNegative(h.weightDecay, "weightDecay value");
  checkFlag(h.amsgrad, "amsgrad");
  checkFlag(h.maximize, "maximize");
}

/**
 * One Adam step for `p` given its (already weight-decayed) gradient. The state
 * (step, expAvg, expAvgSq, maxExpAvgSq with amsgrad) starts at zero on first use, as torch's.
 */
export function adamUpdate(
  p: Tensor,
  grad: Tensor,
  state: ParamState,
  h: Pick<AdamOptions, "lr" | "betas" | "eps" | "amsgrad">,
): void {
  const [beta1, beta2] = h.betas;
  const step = nextStep(state);
  const expAvg = stateBuffer(state, "expAvg", p);
  const expAvgSq = stateBuffer(state, "expAvgSq", p);
  expAvg.mul_(beta1).add_(grad, 1 - beta1);
  expAvgSq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
  const biasCorrection1 = 1 - beta1 ** step;
  const biasCorrection2 = 1 - beta2 ** step;
  const stepSize = h.lr / biasCorrection1;
  const biasCorrection2Sqrt = Math.sqrt(biasCorrection2);
  let second = expAvgSq;
  if (h.amsgrad) {
    const maxExpAvgSq = stateBuffer(state, "maxExpAvgSq", p);
    maxExpAvgSq.copy_(maxExpAvgSq.maximum(expAvgSq));
    second = maxExpAvgSq;
  }
  const denom = second.sqrt().div(biasCorrection2Sqrt).add_(h.eps);
  p.addcdiv_(expAvg, denom, -stepSize);
}

/** Adam's and AdamW's defaults (they differ only in weight decay), validated. */
export function adamDefaults(options: Partial<AdamOptions>, weightDecay: number): AdamOptions {
  const defaults: AdamOptions = {
    lr: options.lr ?? 1e-3,
    betas: options.betas ?? [0.9, 0.999],
    eps: options.eps ?? 1e-8,
    weightDecay: options.weightDecay ?? weightDecay,
    amsgrad: options.amsgrad ?? false,
    maximize: options.maximize ?? false,
  };
  checkAdamOptions(defaults);
  return defaults;
}

export class Adam extends Optimizer<AdamOptions> {
  constructor(params: ParamsInput<AdamOptions>, options: Partial<AdamOptions> = {}) {
    super(params, adamDefaults(options, 0));
  }

  protected override validateGroup(group: ParamGroup<AdamOptions>): void {
    checkAdamOptions(group);
  }

  protected update(): void {
    for (const group of this.paramGroups) {
      for (const p of group.params) {
        if (p.grad === null) continue;
        const state = this.stateOf(p);
        let grad = group.maximize ? p.grad.neg() : p.grad;
        if (group.weightDecay !== 0) grad = grad.add(p, group.weightDecay);
        adamUpdate(p, grad, state, group);
      }
    }
  }
}
