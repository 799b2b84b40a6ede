/**
 * Adagrad (Duchi et al.): per-coordinate learning rates from the running sum
 * of squared gradients, as torch.optim.Adagrad (1.13, single-tensor path).
 * Per parameter, at step t, with g its gradient:
 *
 *   g = maximize ? -g : g;   if weightDecay: g = g + weightDecay * p
 *   clr = lr / (1 + (t - 1) * lrDecay)
 *   sum = sum + g * g;   p -= clr * g / (sqrt(sum) + eps)
 *
 * As in torch, the state (step 0, sum = initialAccumulatorValue) exists from
 * construction, so stateDict() has it before the first step.
 *
 *   const opt = new optim.Adagrad(params, { lr: 0.1 });
 */
import {
  Optimizer,
  type ParamGroup,
  type ParamGroupInput,
  type ParamsInput,
  nextStep,
  stateBuffer,
} from "./optimizer.js";
import { checkFlag, checkNonNegative } from "./validate.js";

export interface AdagradOptions {
  lr: number;
  lrDecay: number;
  weightDecay: number;
  initialAccumulatorValue: number;
  eps: number;
  maximize: boolean;
}

function check(h: Partial<AdagradOptions>): void {
  checkNonNegative(h.lr, "learning rate");
  checkNonNegative(h.lrDecay, "lrDecay value");
  checkNonNegative(h.weightDecay, "weightDecay value");
  checkNonNegative(h.initialAccumulatorValue, "initialAccumulatorValue value");
  checkNonNegative(h.eps, "epsilon value");
  checkFlag(h.maximize, "maximize");
}

export class Adagrad extends Optimizer<AdagradOptions> {
  constructor(params: ParamsInput<AdagradOptions>, options: Partial<AdagradOptions> = {}) {
    const defaults: AdagradOptions = {
      lr: options.lr ?? 1e-2,
      lrDecay: options.lrDecay ?? 0,
      weightDecay: options.weightDecay ?? 0,
      initialAccumulatorValue: options.initialAccumulatorValue ?? 0,
      eps: options.eps ?? 1e-10,
      maximize: options.maximize ?? false,
    };
    check(defaults);
    super(params, defaults);
  }

  protected override validateGroup(group: ParamGroup<AdagradOptions>): void {
    check(group);
  }

  override addParamGroup(paramGroup: ParamGroupInput<AdagradOptions>): void {
    super.addParamGroup(paramGroup);
    const group = this.paramGroups[this.paramGroups.length - 1]!;
    for (const p of group.params) {
      const state = this.stateOf(p);
      state.step = 0;
      stateBuffer(state, "sum", p, group.initialAccumulatorValue);
    }
  }

  protected update(): void {
    for (const { params, lr, lrDecay, weightDecay, initialAccumulatorValue, eps, maximize } of this.paramGroups) {
      for (const p of params) {
        if (p.grad === null) continue;
        const state = this.stateOf(p);
        const sum = stateBuffer(state, "sum", p, initialAccumulatorValue);
        const step = nextStep(state);
        let grad = maximize ? p.grad.neg() : p.grad;
        if (weightDecay !== 0) grad = grad.add(p, weightDecay);
        const clr = lr / (1 + (step - 1) * lrDecay);
        sum.addcmul_(grad, grad, 1);
        const std = sum.sqrt().add_(eps);
        p.addcdiv_(grad, std, -clr);
      }
    }
  }
}
