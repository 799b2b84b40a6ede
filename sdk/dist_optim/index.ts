/**
 * DistributedOptimizer: torch.distributed.optim.DistributedOptimizer's
 * counterpart. It takes RRefs to parameters that live on several workers and
 * steps them all with the gradients of one distributed autograd context.
 *
 *   const opt = new DistributedOptimizer(optim.SGD, paramRRefs, { lr: 0.05 });
 *   await distAutograd.context(async (ctxId) => {
 *     const loss = …; await distAutograd.backward(ctxId, [loss]);
 *     await opt.step(ctxId);
 *   });
 *
 * 1. Construction: the parameter RRefs are grouped by owner; each owner gets
 *    one local optimizer of the given class over its parameters, created there
 *    with remote() (`__tprpcDistOptimCreate`). The class travels by name: one
 *    of tprpc's `optim` classes, or a class registered with rpc.register on
 *    every worker.
 * 2. step(ctxId): every owner steps its optimizer concurrently
 *    (`__tprpcDistOptimStep`) with the gradients its worker holds in the
 *    context: each parameter's `.grad` is swapped for the context's gradient
 *    for the step and restored afterwards (so `.grad` is never touched).
 *    Steps on one worker's optimizer run one after another, in arrival order.
 * 3. setLr(lr): every owner sets the lr of all its optimizer's param groups
 *    (`__tprpcDistOptimSetLr`), queued behind its earlier steps. torch's
 *    DistributedOptimizer has no scheduler; this is how a schedule (warmup,
 *    cosine decay) reaches the remote optimizers: `await opt.setLr(lrAt(i))`
 *    before each step.
 */
import { ValueError } from "../errors/index.js";
import { findContext } from "../dist_autograd/context.js";
import * as optim from "../optim/index.js";
import type { Optimizer } from "../optim/optimizer.js";
import { RRef, register, registrations, remote, rpcAsync } from "../rpc/api.js";
import { Tensor } from "../tensor/tensor.js";

const CREATE = "__tprpcDistOptimCreate";
const STEP = "__tprpcDistOptimStep";
const SET_LR = "__tprpcDistOptimSetLr";

/** An optimizer class as DistributedOptimizer takes it (tprpc's optim classes fit). */
export type DistOptimizerClass<O extends object> = new (params: Tensor[], options?: Partial<O>) => Optimizer<O>;

/** The wire name of an optimizer class: "optim.<Name>" for tprpc's, else its registered name. */
function classNameOf(cls: unknown): string {
  if (typeof cls === "string") return cls;
  for (const [k, v] of Object.entries(optim)) if (v === cls) return `optim.${k}`;
  for (const [k, v] of registrations()) if (v === cls) return k;
  const name = (cls as { name?: string } | null)?.name || "the optimizer class";
  throw new ValueError(
    `DistributedOptimizer: ${name} is neither one of tprpc's optim classes nor registered; ` +
      `call rpc.register("${name}", ${name}) on every worker that owns parameters (and here), then pass it again`,
  );
}

function classByName(name: string): DistOptimizerClass<object> {
  const cls = name.startsWith("optim.")
    ? (optim as Record<string, unknown>)[name.slice("optim.".length)]
    : registrations().get(name);
  if (typeof cls !== "function")
    throw new ValueError(
      `DistributedOptimizer: no optimizer class "${name}" on this worker; rpc.register it here under that name`,
    );
  return cls as DistOptimizerClass<object>;
}

/** The optimizer an owner keeps for one DistributedOptimizer. */
class LocalOptimizer {
  private readonly opt: Optimizer<object>;
  private readonly params: Tensor[];
  private queue: Promise<unknown> = Promise.resolve();

  constructor(className: string, params: Tensor[], options: Record<string, unknown>) {
    this.params = params;
    this.opt = new (classByName(className))(params, options);
  }

  /** Steps with the context's gradients; queued behind earlier steps. */
  step(ctxId: number): Promise<void> {
    const run = this.queue.then(() => this.stepNow(ctxId));
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** Sets every param group's lr; queued behind earlier steps. */
  setLr(lr: number): Promise<void> {
    const run = this.queue.then(() => {
      for (const g of this.opt.paramGroups as { lr?: number }[]) {
        if (typeof g.lr !== "number")
          throw new ValueError("DistributedOptimizer.setLr: this optimizer's param groups have no lr to set");
        g.lr = lr;
      }
    });
    this.queue = run.catch(() => undefined);
    return run;
  }

  private stepNow(ctxId: number): void {
    // NB: a context this worker never joined means none of its parameters got a gradient: nothing to do
    const grads = findContext(ctxId)?.grads ?? new Map<Tensor, Tensor>();
    const saved = this.params.map((p) => p.grad);
    try {
      for (const p of this.params) p.grad = grads.get(p) ?? null;
      this.opt.step();
    } finally {
      this.params.forEach((p, i) => (p.grad = saved[i]!));
    }
  }
}

async function createLocal(className: string, rrefs: RRef<Tensor>[], options: Record<string, unknown>) {
  const params = await Promise.all(rrefs.map((r) => r.toHere()));
  for (const p of params)
    if (!(p instanceof Tensor)) throw new ValueError("DistributedOptimizer: every parameter RRef must hold a Tensor");
  return new LocalOptimizer(className, params, options);
}

async function stepLocal(r: RRef<LocalOptimizer>, ctxId: number): Promise<null> {
  await (await r.toHere()).step(ctxId);
  return null;
}

async function setLrLocal(r: RRef<LocalOptimizer>, lr: number): Promise<null> {
  await (await r.toHere()).setLr(lr);
  return null;
}

register(CREATE, createLocal);
register(STEP, stepLocal);
register(SET_LR, setLrLocal);

export class DistributedOptimizer<O extends object = Record<string, unknown>> {
  private readonly remotes: { owner: string; rref: RRef<LocalOptimizer> }[] = [];

  constructor(
    optimizerClass: DistOptimizerClass<O> | string,
    paramRRefs: readonly RRef<Tensor>[],
    options: Partial<O> = {},
  ) {
    const className = classNameOf(optimizerClass);
    if (!Array.isArray(paramRRefs) || paramRRefs.length === 0 || paramRRefs.some((r) => !(r instanceof RRef)))
      throw new ValueError("DistributedOptimizer: paramRRefs must be a non-empty array of RRefs to parameters");
    const byOwner = new Map<string, RRef<Tensor>[]>();
    for (const r of paramRRefs) {
      const list = byOwner.get(r.ownerName()) ?? [];
      list.push(r);
      byOwner.set(r.ownerName(), list);
    }
    for (const [owner, rrefs] of byOwner)
      this.remotes.push({ owner, rref: remote<LocalOptimizer>(owner, CREATE, [className, rrefs, { ...options }]) });
  }

  /** Steps every owner's optimizer with the gradients of context `ctxId`; rejects if any step fails. */
  async step(ctxId: number): Promise<void> {
    if (typeof ctxId !== "number" || !Number.isSafeInteger(ctxId))
      throw new ValueError(`DistributedOptimizer.step(ctxId): ctxId must be a context id, got ${String(ctxId)}`);
    await Promise.all(this.remotes.map((r) => rpcAsync(r.owner, STEP, [r.rref, ctxId])));
  }

  /**
   * Sets the learning rate of every param group on every owner, for the steps
   * that follow (a schedule: call it before each step with that step's lr).
   */
  async setLr(lr: number): Promise<void> {
    if (typeof lr !== "number" || !Number.isFinite(lr) || lr < 0)
      throw new ValueError(`DistributedOptimizer.setLr(lr): lr must be a finite number >= 0, got ${String(lr)}`);
    await Promise.all(this.remotes.map((r) => rpcAsync(r.owner, SET_LR, [r.rref, lr])));
  }
}
