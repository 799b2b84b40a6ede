/**
 * Rprop (Riedmiller & Braun): resilient backpropagation, full-batch steps that
 * use only the sign of the gradient, each coordinate with its own step size
 * that grows while the sign holds and shrinks when it flips; as
 * torch.optim.Rprop (1.13, single-tensor path). Per parameter, with g its
 * gradient and g' the one kept from the previous step:
 *
 *   g = maximize ? -g : g
 *   f = etaplus where g * g' > 0, etaminus where g * g' < 0, else 1
 *   size = clamp(size * f, minStep, maxStep)
 *   where the sign flipped (f = etaminus): g = 0 (no move now, and no flip seen next step)
 *   p -= sign(g) * size;   g' = g
 *
 * State per parameter: step, prev (g', zeros) and stepSize (filled with the
 * group's lr), made at the parameter's first step.
 *
 *   const opt = new optim.Rprop(params, { lr: 0.01, etas: [0.5, 1.2] });
 */
import { fullLike } from "../tensor/creation.js";
import { Optimizer, type ParamGroup, type ParamsInput, nextStep, stateBuffer } from "./optimizer.js";
import { checkEtas, checkFlag, checkNonNegative, checkStepSizes } from "./validate.js";

export interface RpropOptions {
  /** The initial step size of every coordinate. */
  lr: number;
  /** [etaminus, etaplus]: step-size factors on a sign flip and on a kept sign, 0 < etaminus < 1 < etaplus. */
  etas: [number, number];
  /** [min, max]: the bounds of the step sizes. */
  stepSizes: [number, number];
  maximize: boolean;
}

function check(h: Partial<RpropOptions>): void {
  checkNonNegative(h.lr, "learning rate");
  checkEtas(h.etas);
  checkStepSizes(h.stepSizes);
  checkFlag(h.maximize, "maximize");
}

export class Rprop extends Optimizer<RpropOptions> {
  constructor(params: ParamsInput<RpropOptions>, options: Partial<RpropOptions> = {}) {
    const defaults: RpropOptions = {
      lr: options.lr ?? 1e-2,
      etas: options.etas ?? [0.5, 1.2],
      stepSizes: options.stepSizes ?? [1e-6, 50],
      maximize: options.maximize ?? false,
    };
    check(defaults);
    super(params, defaults);
  }

  protected override validateGroup(group: ParamGroup<RpropOptions>): void {
    check(group);
  }

  protected update(): void {
    for (const { params, lr, etas, stepSizes, maximize } of this.paramGroups) {
      const [etaminus, etaplus] = etas;
      const [minStep, maxStep] = stepSizes;
      for (const p of params) {
        if (p.grad === null) continue;
        const state = this.stateOf(p);
        nextStep(state);
        const prev = stateBuffer(state, "prev", p);
        const stepSize = stateBuffer(state, "stepSize", p, lr);
        const grad = maximize ? p.grad.neg() : p.grad;
        const agreement = grad.mul(prev);
        const flipped = agreement.lt(0);
        const factor = fullLike(p, 1).maskedFill_(agreement.gt(0), etaplus).maskedFill_(flipped, etaminus);
        stepSize.mul_(factor).clamp_(minStep, maxStep);
        const kept = grad.maskedFill(flipped, 0);
        p.addcmul_(kept.sign(), stepSize, -1);
        prev.copy_(kept);
      }
    }
  }
}
