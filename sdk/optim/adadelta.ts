/**
 * Adadelta (Zeiler): steps scaled by the ratio of two running RMS values, of
 * past updates and of past gradients, so the unit of the step matches the
 * parameter's; as torch.optim.Adadelta (1.13, single-tensor path). Per
 * parameter, with g its gradient:
 *
 *   g = maximize ? -g : g;   if weightDecay: g = g + weightDecay * p
 *   v = rho * v + (1 - rho) * g * g
 *   delta = sqrt(u + eps) / sqrt(v + eps) * g
 *   u = rho * u + (1 - rho) * delta * delta;   p -= lr * delta
 *
 * State per parameter: step, squareAvg (v), accDelta (u), zeros at the first step.
 *
 *   const opt = new optim.Adadelta(params, { rho: 0.95 });
 */
import { Optimizer, type ParamGroup, type ParamsInput, nextStep, stateBuffer } from "./optimizer.js";
import { checkFlag, checkNonNegative, checkUnitInterval } from "./validate.js";

export interface AdadeltaOptions {
  /** Scales the delta before it is applied (1.0 in the paper). */
  lr: number;
  /** Decay rate of both running averages, in [0, 1]. */
  rho: number;
  eps: number;
  weightDecay: number;
  maximize: boolean;
}

function check(h: Partial<AdadeltaOptions>): void {
  checkNonNegative(h.lr, "learning rate");
  checkUnitInterval(h.rho, "rho value");
  checkNonNegative(h.eps, "epsilon value");
  checkNonNegative(h.weightDecay, "weightDecay value");
  checkFlag(h.maximize, "maximize");
}

export class Adadelta extends Optimizer<AdadeltaOptions> {
  constructor(params: ParamsInput<AdadeltaOptions>, options: Partial<AdadeltaOptions> = {}) {
    const defaults: AdadeltaOptions = {
      lr: options.lr ?? 1.0,
      rho: options.rho ?? 0.9,
      eps: options.eps ?? 1e-6,
      weightDecay: options.weightDecay ?? 0,
      maximize: options.maximize ?? false,
    };
    check(defaults);
    super(params, defaults);
  }

  protected override validateGroup(group: ParamGroup<AdadeltaOptions>): void {
    check(group);
  }

  protected update(): void {
    for (const { params, lr, rho, eps, weightDecay, maximize } of this.paramGroups) {
      for (const p of params) {
        if (p.grad === null) continue;
        const state = this.stateOf(p);
        nextStep(state);
        const squareAvg = stateBuffer(state, "squareAvg", p);
        const accDelta = stateBuffer(state, "accDelta", p);
        let grad = maximize ? p.grad.neg() : p.grad;
        if (weightDecay !== 0) grad = grad.add(p, weightDecay);
        squareAvg.mul_(rho).addcmul_(grad, grad, 1 - rho);
        const std = squareAvg.add(eps).sqrt_();
        const delta = accDelta.add(eps).sqrt_().div_(std).mul_(grad);
        accDelta.mul_(rho).addcmul_(delta, delta, 1 - rho);
        p.add_(delta, -lr);
      }
    }
  }
}
