/**
 * Stochastic gradient descent with optional momentum, dampening, Nesterov
 * momentum and L2 weight decay: torch.optim.SGD (1.13, single-tensor path),
 * operation for operation. Per parameter, with g its gradient:
 *
 *   g = maximize ? -g : g;   if weightDecay: g = g + weightDecay * p
 *   if momentum: buf = (first step) clone(g) | buf * momentum + (1 - dampening) * g
 *                g = nesterov ? g + momentum * buf : buf
 *   p -= lr * g
 *
 * The backend's fused sgdStep (one native pass per parameter, no temporaries) does it when it
 * takes the tensors (contiguous, one float dtype); otherwise the same update runs as tensor ops.
 *
 *   const opt = new optim.SGD(params, { lr: 0.1, momentum: 0.9 });
 */
import { ValueError } from "../errors/index.js";
import { getBackend } from "../tensor/backend/registry.js";
import * as raw from "../tensor/raw.js";
import { peekGrad } from "../autograd/grad_slot.js";
import { Tensor } from "../tensor/tensor.js";
import { Optimizer, type ParamGroup, type ParamsInput } from "./optimizer.js";
import { checkFlag, checkNonNegative } from "./validate.js";

export interface SGDOptions {
  /** Learning rate; required, here or in every param group. */
  lr: number;
  momentum: number;
  dampening: number;
  weightDecay: number;
  nesterov: boolean;
  maximize: boolean;
}

function check(h: Partial<SGDOptions>): void {
  if (h.lr !== undefined) checkNonNegative(h.lr, "learning rate");
  checkNonNegative(h.momentum, "momentum value");
  checkNonNegative(h.dampening, "dampening value");
  checkNonNegative(h.weightDecay, "weightDecay value");
  checkFlag(h.nesterov, "nesterov");
  checkFlag(h.maximize, "maximize");
  if (h.nesterov && (h.momentum! <= 0 || h.dampening !== 0))
    throw new ValueError("Nesterov momentum requires a momentum and zero dampening");
}

export class SGD extends Optimizer<SGDOptions> {
  constructor(params: ParamsInput<SGDOptions>, options: Partial<SGDOptions> = {}) {
    const defaults: Partial<SGDOptions> = {
      lr: options.lr,
      momentum: options.momentum ?? 0,
      dampening: options.dampening ?? 0,
      weightDecay: options.weightDecay ?? 0,
      nesterov: options.nesterov ?? false,
      maximize: options.maximize ?? false,
    };
    check(defaults);
    super(params, defaults);
  }

  protected override validateGroup(group: ParamGroup<SGDOptions>): void {
    check(group);
  }

  protected update(): void {
    for (const { params, lr, momentum, dampening, weightDecay, nesterov, maximize } of this.paramGroups) {
      for (const p of params) {
        // NB: peekGrad: this step keeps nothing it reads (sdk/autograd/grad_slot.ts)
        const grad = peekGrad(p);
        if (grad === null) continue;
        const state = this.stateOf(p);
        const old = state.momentumBuffer;
        const first = momentum !== 0 && !(old instanceof Tensor);
        const buf = momentum === 0 ? null : first ? raw.output(p.shape, p.dtype, p.device) : (old as Tensor);
        const h = { lr, momentum, dampening, weightDecay, nesterov, maximize, first };
        if (getBackend().sgdStep?.(p, grad, buf, h) === true) {
          p.storage.version++;
          if (buf) {
            buf.storage.version++;
            state.momentumBuffer = buf;
          }
          continue;
        }
        let d = maximize ? grad.neg() : grad;
        if (weightDecay !== 0) d = d.add(p, weightDecay);
        if (momentum !== 0) {
          let buf = state.momentumBuffer;
          if (buf instanceof Tensor) buf.mul_(momentum).add_(d, 1 - dampening);
          else {
            buf = d.clone();
            state.momentumBuffer = buf;
          }
          d = nesterov ? d.add(buf, momentum) : buf;
        }
        p.add_(d, -lr);
      }
    }
  }
}
