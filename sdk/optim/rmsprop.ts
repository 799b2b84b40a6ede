/**
 * RMSprop (Hinton): gradients scaled by a running average of their squares,
 * optionally centered (minus the squared running mean) and with momentum, as
 * torch.optim.RMSprop (1.13, single-tensor path). Per parameter, with g its
 * gradient:
 *
 *   g = maximize ? -g : g;   if weightDecay: g = g + weightDecay * p
 *   v = alpha * v + (1 - alpha) * g * g
 *   avg = centered ? sqrt(v - m * m) with m = alpha * m + (1 - alpha) * g : sqrt(v);   avg += eps
 *   momentum ? (buf = momentum * buf + g / avg;  p -= lr * buf) : p -= lr * g / avg
 *
 *   const opt = new optim.RMSprop(params, { lr: 0.01, momentum: 0.9 });
 */
import type { Tensor } from "../tensor/tensor.js";
import { Optimizer, type ParamGroup, type ParamsInput, nextStep, stateBuffer } from "./optimizer.js";
import { checkFlag, checkNonNegative } from "./validate.js";

export interface RMSpropOptions {
  lr: number;
  /** Smoothing constant of the running averages. */
  alpha: number;
  eps: number;
  weightDecay: number;
  momentum: number;
  centered: boolean;
  maximize: boolean;
}

function check(h: Partial<RMSpropOptions>): void {
  checkNonNegative(h.lr, "learning rate");
  checkNonNegative(h.eps, "epsilon value");
  checkNonNegative(h.momentum, "momentum value");
  checkNonNegative(h.weightDecay, "weightDecay value");
  checkNonNegative(h.alpha, "alpha value");
  checkFlag(h.centered, "centered");
  checkFlag(h.maximize, "maximize");
}

export class RMSprop extends Optimizer<RMSpropOptions> {
  constructor(params: ParamsInput<RMSpropOptions>, options: Partial<RMSpropOptions> = {}) {
    const defaults: RMSpropOptions = {
      lr: options.lr ?? 1e-2,
      alpha: options.alpha ?? 0.99,
      eps: options.eps ?? 1e-8,
      weightDecay: options.weightDecay ?? 0,
      momentum: options.momentum ?? 0,
      centered: options.centered ?? false,
      maximize: options.maximize ?? false,
    };
    check(defaults);
    super(params, defaults);
  }

  protected override validateGroup(group: ParamGroup<RMSpropOptions>): void {
    check(group);
  }

  protected update(): void {
    for (const { params, lr, alpha, eps, weightDecay, momentum, centered, maximize } of this.paramGroups) {
      for (const p of params) {
        if (p.grad === null) continue;
        const state = this.stateOf(p);
        nextStep(state);
        const squareAvg = stateBuffer(state, "squareAvg", p);
        let grad = maximize ? p.grad.neg() : p.grad;
        if (weightDecay !== 0) grad = grad.add(p, weightDecay);
        squareAvg.mul_(alpha).addcmul_(grad, grad, 1 - alpha);
        let avg: Tensor;
        if (centered) {
          const gradAvg = stateBuffer(state, "gradAvg", p);
          gradAvg.mul_(alpha).add_(grad, 1 - alpha);
          avg = squareAvg.sub(gradAvg.mul(gradAvg)).sqrt();
        } else avg = squareAvg.sqrt();
        avg.add_(eps);
        if (momentum > 0) {
          const buf = stateBuffer(state, "momentumBuffer", p);
          buf.mul_(momentum).addcdiv_(grad, avg);
          p.add_(buf, -lr);
        } else p.addcdiv_(grad, avg, -lr);
      }
    }
  }
}
