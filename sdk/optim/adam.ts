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
 * `adamStep` (sdk/tensor/backend's fused kernel, or the same ops as tensor ops) is shared with AdamW.
 *
 *   const opt = new optim.Adam(params, { lr: 1e-3 });
 */
import { getBackend } from "../tensor/backend/registry.js";
import { peekGrad } from "../autograd/grad_slot.js";
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

/** How the weight decay enters one step: AdamW's decoupled decay of p, or Adam's L2 term in g. */
export interface AdamDecay {
  /** AdamW: p *= 1 - lr * weightDecay before the update (torch 1.13 does this even for 0). */
  decoupled: boolean;
  weightDecay: number;
  maximize: boolean;
}

/**
 * One Adam/AdamW step for `p` with gradient `grad` (p.grad): weight decay, then the update. The
 * state (step, expAvg, expAvgSq, maxExpAvgSq with amsgrad) starts at zero on first use, as torch's.
 *
 * 1. When p, grad and the state are contiguous float32/float64 tensors of one dtype on one CPU or
 *    CUDA device (the usual case), the backend's fused adamStep does it in one pass (one native
 *    loop, or one kernel launch per parameter on CUDA).
 * 2. Otherwise the same arithmetic runs as a chain of tensor ops (adamUpdate). Both give the
 *    same numbers: each line of the fused kernel is one op of the chain, rounded the same way.
 */
export function adamStep(
  p: Tensor,
  grad: Tensor,
  state: ParamState,
  h: Pick<AdamOptions, "lr" | "betas" | "eps" | "amsgrad">,
  decay: AdamDecay,
): void {
  const step = nextStep(state);
  const expAvg = stateBuffer(state, "expAvg", p);
  const expAvgSq = stateBuffer(state, "expAvgSq", p);
  const maxExpAvgSq = h.amsgrad ? stateBuffer(state, "maxExpAvgSq", p) : null;
  const bufs = [p, grad, expAvg, expAvgSq, ...(maxExpAvgSq ? [maxExpAvgSq] : [])];
  const fusable =
    (p.dtype === "float32" || p.dtype === "float64") &&
    (p.device.type === "cpu" || p.device.type === "cuda") &&
    bufs.every((t) => t.dtype === p.dtype && t.device.equals(p.device) && t.isContiguous() && t.numel() === p.numel());
  if (!fusable) {
    const g = decay.maximize ? grad.neg() : grad;
    if (decay.decoupled) p.mul_(1 - h.lr * decay.weightDecay);
    adamUpdate(p, !decay.decoupled && decay.weightDecay !== 0 ? g.add(p, decay.weightDecay) : g, state, h, step);
    return;
  }
  const [beta1, beta2] = h.betas;
  getBackend().adamStep(p, grad, expAvg, expAvgSq, maxExpAvgSq, {
    decay: decay.decoupled ? 1 - h.lr * decay.weightDecay : 1,
    l2: decay.decoupled ? 0 : decay.weightDecay,
    beta1,
    oneMinusBeta1: 1 - beta1,
    beta2,
    oneMinusBeta2: 1 - beta2,
    bc2Sqrt: Math.sqrt(1 - beta2 ** step),
    eps: h.eps,
    negStepSize: -(h.lr / (1 - beta1 ** step)),
    maximize: decay.maximize,
  });
  // NB: in-place writes bump the version counters, as the tensor ops' would (autograd's saved-tensor checks).
  for (const t of [p, expAvg, expAvgSq, maxExpAvgSq]) if (t) t.storage.version++;
}

/**
 * The Adam update as tensor ops, for `p` given its (already weight-decayed) gradient, at step
 * `step` (already counted): the reference the fused kernel follows.
 */
export function adamUpdate(
  p: Tensor,
  grad: Tensor,
  state: ParamState,
  h: Pick<AdamOptions, "lr" | "betas" | "eps" | "amsgrad">,
  step: number,
): void {
  const [beta1, beta2] = h.betas;
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
        // NB: peekGrad: adamStep keeps nothing it reads (sdk/autograd/grad_slot.ts)
        const grad = peekGrad(p);
        if (grad === null) continue;
        adamStep(p, grad, this.stateOf(p), group, {
          decoupled: false,
          weightDecay: group.weightDecay,
          maximize: group.maximize,
        });
      }
    }
  }
}
