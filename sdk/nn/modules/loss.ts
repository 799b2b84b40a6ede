/**
 * Loss modules, as torch.nn's: MSELoss, CrossEntropyLoss, NLLLoss and
 * BCEWithLogitsLoss. Each holds its options (class weights as buffers, so
 * they travel in the state dict as in PyTorch) and its forward(input,
 * target) calls the nn.functional form.
 *
 *   const lossFn = new CrossEntropyLoss({ ignoreIndex: -1, labelSmoothing: 0.1 });
 *   const loss = lossFn.forward(logits, targets);
 */
import type { Tensor } from "../../tensor/tensor.js";
import * as F from "../functional.js";
import { Module } from "../module.js";

export class MSELoss extends Module<[Tensor, Tensor], Tensor> {
  readonly reduction: F.Reduction;

  constructor(opts: { reduction?: F.Reduction } | null = {}) {
    super();
    this.reduction = opts?.reduction ?? "mean";
  }

  forward(input: Tensor, target: Tensor): Tensor {
    return F.mseLoss(input, target, { reduction: this.reduction });
  }
}

export class NLLLoss extends Module<[Tensor, Tensor], Tensor> {
  declare weight: Tensor | null;
  readonly ignoreIndex: number;
  readonly reduction: F.Reduction;

  constructor(opts: F.WeightedLossOptions | null = {}) {
    super();
    this.registerBuffer("weight", opts?.weight ?? null);
    this.ignoreIndex = opts?.ignoreIndex ?? -100;
    this.reduction = opts?.reduction ?? "mean";
  }

  forward(input: Tensor, target: Tensor): Tensor {
    return F.nllLoss(input, target, { weight: this.weight, ignoreIndex: this.ignoreIndex, reduction: this.reduction });
  }
}

export class CrossEntropyLoss extends Module<[Tensor, Tensor], Tensor> {
  declare weight: Tensor | null;
  readonly ignoreIndex: number;
  readonly reduction: F.Reduction;
  readonly labelSmoothing: number;

  constructor(opts: F.CrossEntropyOptions | null = {}) {
    super();
    this.registerBuffer("weight", opts?.weight ?? null);
    this.ignoreIndex = opts?.ignoreIndex ?? -100;
    this.reduction = opts?.reduction ?? "mean";
    this.labelSmoothing = opts?.labelSmoothing ?? 0;
  }

  forward(input: Tensor, target: Tensor): Tensor {
    return F.crossEntropy(input, target, {
      weight: this.weight,
      ignoreIndex: this.ignoreIndex,
      reduction: this.reduction,
      labelSmoothing: this.labelSmoothing,
    });
  }
}

export class BCEWithLogitsLoss extends Module<[Tensor, Tensor], Tensor> {
  declare weight: Tensor | null;
  declare posWeight: Tensor | null;
  readonly reduction: F.Reduction;

  constructor(opts: F.BCEWithLogitsOptions | null = {}) {
    super();
    this.registerBuffer("weight", opts?.weight ?? null);
    this.registerBuffer("posWeight", opts?.posWeight ?? null);
    this.reduction = opts?.reduction ?? "mean";
  }

  forward(input: Tensor, target: Tensor): Tensor {
    return F.binaryCrossEntropyWithLogits(input, target, {
      weight: this.weight,
      posWeight: this.posWeight,
      reduction: this.reduction,
    });
  }
}
