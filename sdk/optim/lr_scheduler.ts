/**
 * Learning-rate schedulers, torch.optim.lr_scheduler (1.13): a scheduler
 * rewrites every param group's `lr` each time its step() is called (once per
 * epoch, after the optimizer's step). Construction performs the first step
 * (epoch 0), as torch's does. Each group's starting lr is kept in the group
 * as `initialLr` (torch's initial_lr), so schedulers can be chained.
 *
 *   const sched = new optim.lrScheduler.StepLR(opt, 30, 0.1);
 *   for (let epoch = 0; epoch < 100; epoch++) { train(); sched.step(); }
 */
import { ValueError } from "../errors/index.js";
import type { Optimizer } from "./optimizer.js";

/** Any optimizer whose groups have a learning rate. */
export type LrOptimizer = Optimizer<{ lr: number }>;

export interface LRSchedulerStateDict {
  lastEpoch: number;
  stepCount: number;
  baseLrs: number[];
  lastLr: number[];
}

export abstract class LRScheduler {
  readonly optimizer: LrOptimizer;
  /** Each group's initialLr when the scheduler was made. */
  baseLrs: number[];
  /** The epoch of the last step(): 0 right after construction. */
  lastEpoch = -1;
  protected stepCount = 0;
  private lastLr: number[] = [];

  constructor(optimizer: LrOptimizer) {
    this.optimizer = optimizer;
    for (const g of optimizer.paramGroups) g.initialLr ??= g.lr;
    this.baseLrs = optimizer.paramGroups.map((g) => g.initialLr!);
  }

  /** The groups' learning rates for epoch `lastEpoch` (torch's chainable get_lr). */
  protected abstract getLr(): number[];

  /**
   * Takes the first step, as torch's constructor does. NB: subclasses call it
   * last in their own constructor: getLr reads their fields, which do not exist
   * yet while the base constructor runs.
   */
  protected start(): void {
    this.step();
  }

  /** Advances one epoch and writes the new learning rates into the param groups. */
  step(): void {
    this.stepCount += 1;
    this.lastEpoch += 1;
    const lrs = this.getLr();
    this.optimizer.paramGroups.forEach((g, i) => {
      g.lr = lrs[i]!;
    });
    this.lastLr = this.optimizer.paramGroups.map((g) => g.lr);
  }

  /** The learning rates the last step() set, one per group. */
  getLastLr(): number[] {
    return [...this.lastLr];
  }

  stateDict(): LRSchedulerStateDict {
    return {
      lastEpoch: this.lastEpoch,
      stepCount: this.stepCount,
      baseLrs: [...this.baseLrs],
      lastLr: [...this.lastLr],
    };
  }

  loadStateDict(stateDict: LRSchedulerStateDict): void {
    this.lastEpoch = stateDict.lastEpoch;
    this.stepCount = stateDict.stepCount;
    this.baseLrs = [...stateDict.baseLrs];
    this.lastLr = [...stateDict.lastLr];
  }

  protected currentLrs(): number[] {
    return this.optimizer.paramGroups.map((g) => g.lr);
  }
}

/** lr = initialLr * lrLambda(epoch); one function for all groups or one per group. */
export class LambdaLR extends LRScheduler {
  private readonly lrLambdas: ((epoch: number) => number)[];

  constructor(optimizer: LrOptimizer, lrLambda: ((epoch: number) => number) | ((epoch: number) => number)[]) {
    super(optimizer);
    const n = optimizer.paramGroups.length;
    if (Array.isArray(lrLambda) && lrLambda.length !== n)
      throw new ValueError(`Expected ${n} lrLambdas, but got ${lrLambda.length}`);
    this.lrLambdas = Array.isArray(lrLambda) ? [...lrLambda] : Array.from({ length: n }, () => lrLambda);
    this.start();
  }

  protected getLr(): number[] {
    return this.baseLrs.map((base, i) => base * this.lrLambdas[i]!(this.lastEpoch));
  }
}

/** Multiplies the lr by gamma every stepSize epochs. */
export class StepLR extends LRScheduler {
  constructor(
    optimizer: LrOptimizer,
    readonly stepSize: number,
    readonly gamma = 0.1,
  ) {
    super(optimizer);
    if (!Number.isInteger(stepSize) || stepSize <= 0)
      throw new ValueError(`StepLR: stepSize must be a positive integer, got ${stepSize}`);
    this.start();
  }

  protected getLr(): number[] {
    const lrs = this.currentLrs();
    if (this.lastEpoch === 0 || this.lastEpoch % this.stepSize !== 0) return lrs;
    return lrs.map((lr) => lr * this.gamma);
  }
}

/**
 * Cosine annealing from initialLr down to etaMin over tMax epochs (and back up
 * over the next tMax, periodically), in torch's recursive form, so it composes
 * with other changes to the lr as torch's does.
 */
export class CosineAnnealingLR extends LRScheduler {
  constructor(
    optimizer: LrOptimizer,
    readonly tMax: number,
    readonly etaMin = 0,
  ) {
    super(optimizer);
    if (!(tMax > 0)) throw new ValueError(`CosineAnnealingLR: tMax must be positive, got ${tMax}`);
    this.start();
  }

  protected getLr(): number[] {
    const { lastEpoch: e, tMax: T, etaMin } = this;
    const lrs = this.currentLrs();
    if (e === 0) return lrs;
    if ((e - 1 - T) % (2 * T) === 0)
      return lrs.map((lr, i) => lr + ((this.baseLrs[i]! - etaMin) * (1 - Math.cos(Math.PI / T))) / 2);
    return lrs.map(
      (lr) => ((1 + Math.cos((Math.PI * e) / T)) / (1 + Math.cos((Math.PI * (e - 1)) / T))) * (lr - etaMin) + etaMin,
    );
  }
}
