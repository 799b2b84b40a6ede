/**
 * Adamax (Kingma & Ba, section 7): Adam with the second moment replaced by an
 * exponentially weighted infinity norm of the gradients; as
 * torch.optim.Adamax (1.13, single-tensor path). Per parameter, at step t,
 * with g its gradient:
 *
 *   g = maximize ? -g : g;   if weightDecay: g = g + weightDecay * p
 *   m = beta1 * m + (1 - beta1) * g
 *   u = max(beta2 * u, |g| + eps)
 *   p -= lr / (1 - beta1^t) * m / u
 *
 * State per parameter: step, expAvg (m), expInf (u), zeros at the first step.
 *
 *   const opt = new optim.Adamax(params, { lr: 2e-3 });
 */
import { Optimizer, type ParamGroup, type ParamsInput, nextStep, stateBuffer } from "./optimizer.js";
import { checkBetas, checkFlag, checkNonNegative } from "./validate.js";

export interface AdamaxOptions {
  lr: number;
  /** Decay rates of the first moment and of the infinity norm. */
  betas: [number, number];
  eps: number;
  weightDecay: number;
  maximize: boolean;
}

function check(h: Partial<AdamaxOptions>): void {
  checkNonNegative(h.lr, "learning rate");
  checkNonNegative(h.eps, "epsilon value");
  checkBetas(h.betas);
  checkNonNegative(h.weightDecay, "weightDecay value");
  checkFlag(h.maximize, "maximize");
}

export class Adamax extends Optimizer<AdamaxOptions> {
  constructor(params: ParamsInput<AdamaxOptions>, options: Partial<AdamaxOptions> = {}) {
    const defaults: AdamaxOptions = {
      lr: options.lr ?? 2e-3,
      betas: options.betas ?? [0.9, 0.999],
      eps: options.eps ?? 1e-8,
      weightDecay: options.weightDecay ?? 0,
      maximize: options.maximize ?? false,
    };
    check(defaults);
    super(params, defaults);
  }

  protected override validateGroup(group: ParamGroup<AdamaxOptions>): void {
    check(group);
  }

  protected update(): void {
    for (const { params, lr, betas, eps, weightDecay, maximize } of this.paramGroups) {
      const [beta1, beta2] = betas;
      for (const p of params) {
        if (p.grad === null) continue;
        const state = this.stateOf(p);
        const step = nextStep(state);
        const expAvg = stateBuffer(state, "expAvg", p);
        const expInf = stateBuffer(state, "expInf", p);
        let grad = maximize ? p.grad.neg() : p.grad;
        if (weightDecay !== 0) grad = grad.add(p, weightDecay);
        expAvg.mul_(beta1).add_(grad, 1 - beta1);
        expInf.copy_(expInf.mul(beta2).maximum(grad.abs().add_(eps)));
        const clr = lr / (1 - beta1 ** step);
        p.addcdiv_(expAvg, expInf, -clr);
      }
    }
  }
}
