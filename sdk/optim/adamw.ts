/**
 * AdamW (Loshchilov & Hutter): Adam with decoupled weight decay, as
 * torch.optim.AdamW (1.13, single-tensor path). Before the Adam update
 * (adam.ts), the parameter itself decays: p = p * (1 - lr * weightDecay);
 * the gradient is left alone. Default weightDecay is 1e-2.
 *
 *   const opt = new optim.AdamW(params, { lr: 3e-4, weightDecay: 0.1 });
 */
import { peekGrad } from "../autograd/grad_slot.js";
import { Optimizer, type ParamGroup, type ParamsInput } from "./optimizer.js";
import { type AdamOptions, adamDefaults, adamStep, checkAdamOptions } from "./adam.js";

export type AdamWOptions = AdamOptions;

export class AdamW extends Optimizer<AdamWOptions> {
  constructor(params: ParamsInput<AdamWOptions>, options: Partial<AdamWOptions> = {}) {
    super(params, adamDefaults(options, 1e-2));
  }

  protected override validateGroup(group: ParamGroup<AdamWOptions>): void {
    checkAdamOptions(group);
  }

  protected update(): void {
    for (const group of this.paramGroups) {
      for (const p of group.params) {
        // NB: peekGrad: adamStep keeps nothing it reads (sdk/autograd/grad_slot.ts)
        const grad = peekGrad(p);
        if (grad === null) continue;
        // NB: torch 1.13 decays even when weightDecay is 0 (a multiply by exactly 1).
        adamStep(p, grad, this.stateOf(p), group, {
          decoupled: true,
          weightDecay: group.weightDecay,
          maximize: group.maximize,
        });
      }
    }
  }
}
