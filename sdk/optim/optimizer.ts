/**
 * The Optimizer base class, torch.optim.Optimizer's counterpart: parameter
 * groups with their hyperparameters, per-parameter state, zeroGrad, step with
 * an optional closure, and stateDict / loadStateDict in PyTorch's layout
 * (state keyed by the parameter's index across all groups, groups listing
 * indices instead of tensors).
 *
 * Subclasses implement `update()`, one optimization step over every group,
 * which `step()` runs under noGrad. Updates are written in place into the
 * parameter tensors, so a parameter keeps its identity (and its storage) for
 * its whole life: RemoteModule and DistributedOptimizer hold on to it.
 *
 *   const opt = new optim.SGD(model.parameters(), { lr: 0.1, momentum: 0.9 });
 *   opt.zeroGrad();
 *   loss.backward();
 *   opt.step();
 */
import "../autograd/methods.js";
import { enableGrad, noGrad } from "../autograd/grad_mode.js";
import { ValueError } from "../errors/index.js";
import { fullLike } from "../tensor/creation.js";
import { dropGrad, peekGrad } from "../autograd/grad_slot.js";
import * as raw from "../tensor/raw.js";
import { Tensor } from "../tensor/tensor.js";

/** Per-parameter optimizer state: buffers (Tensors) and counters (numbers). */
export type ParamState = Record<string, Tensor | number>;

/** A parameter group: its parameters and a value for every hyperparameter. */
export type ParamGroup<O extends object> = O & {
  params: Tensor[];
  /** Set by learning-rate schedulers: the lr the schedule starts from (torch's initial_lr). */
  initialLr?: number;
};

/** A parameter group as passed in: hyperparameters left out take the optimizer's defaults. */
export type ParamGroupInput<O extends object> = Partial<O> & { params: Iterable<Tensor> | Tensor };

/** What an optimizer takes: parameters (one group), or a list of parameter groups. */
export type ParamsInput<O extends object> = Iterable<Tensor> | Iterable<ParamGroupInput<O>>;

/** A parameter group in a state dict: `params` lists parameter indices. */
export type ParamGroupState<O extends object> = O & { params: number[]; initialLr?: number };

/** The optimizer's state in PyTorch's layout (camelCase keys). */
export interface OptimizerStateDict<O extends object> {
  state: Record<number, ParamState>;
  paramGroups: ParamGroupState<O>[];
}

/** The constructor shape every optimizer shares (DistributedOptimizer builds optimizers through it). */
export type OptimizerClass<O extends object> = new (params: ParamsInput<O>, options?: Partial<O>) => Optimizer<O>;

/** state[key] as a Tensor, created as zeros like `like` (or filled with `init`) when absent. */
export function stateBuffer(state: ParamState, key: string, like: Tensor, init = 0): Tensor {
  let t = state[key];
  if (!(t instanceof Tensor)) {
    t = fullLike(like, init);
    state[key] = t;
  }
  return t;
}

/** Increments the step counter state.step (from 0) and returns the new value. */
export function nextStep(state: ParamState): number {
  const step = (typeof state.step === "number" ? state.step : 0) + 1;
  state.step = step;
  return step;
}

function describe(v: unknown): string {
  if (v === null) return "null";
  if (typeof v === "object") return (v as object).constructor?.name ?? "object";
  return typeof v;
}

/** A copy of a hyperparameter value: arrays (betas) are copied, scalars kept. */
function copyValue<V>(v: V): V {
  return (Array.isArray(v) ? [...v] : v) as V;
}

export abstract class Optimizer<O extends object = Record<string, unknown>> {
  /** Hyperparameter values for groups that don't set their own; `undefined` marks a required one (SGD's lr). */
  readonly defaults: Readonly<Partial<O>>;
  paramGroups: ParamGroup<O>[] = [];
  /** Per-parameter state, keyed by the parameter tensor itself. */
  state = new Map<Tensor, ParamState>();

  constructor(params: ParamsInput<O>, defaults: Partial<O>) {
    this.defaults = defaults;
    if (params instanceof Tensor)
      throw new ValueError(
        "params argument given to the optimizer should be an iterable of Tensors or param groups, but got a Tensor; " +
          "pass [tensor] instead",
      );
    if (params === null || typeof params !== "object" || !(Symbol.iterator in params))
      throw new ValueError(
        `params argument given to the optimizer should be an iterable of Tensors or param groups, but got ${describe(params)}`,
      );
    const list: unknown[] = [...(params as Iterable<unknown>)];
    if (list.length === 0) throw new ValueError("optimizer got an empty parameter list");
    const groups = list[0] instanceof Tensor ? [{ params: list }] : list;
    for (const g of groups) this.addParamGroup(g as ParamGroupInput<O>);
  }

  /**
   * Checks one group's hyperparameters (after defaults are filled in); throws
   * a ValueError naming the bad value. Optimizers override it.
   */
  protected validateGroup(_group: ParamGroup<O>): void {}

  /** One optimization step over every group; runs under noGrad. */
  protected abstract update(): void;

  /** Adds a group of parameters, e.g. to unfreeze layers while training (torch's add_param_group). */
  addParamGroup(paramGroup: ParamGroupInput<O>): void {
    if (
      paramGroup === null ||
      typeof paramGroup !== "object" ||
      paramGroup instanceof Tensor ||
      !("params" in paramGroup)
    )
      throw new ValueError(`a param group must be an object with a "params" key, but got ${describe(paramGroup)}`);
    const given: unknown = paramGroup.params;
    if (given instanceof Set)
      throw new ValueError(
        "optimizer parameters need to be organized in ordered collections, but the ordering of tensors in sets " +
          "will change between runs. Please use an array instead.",
      );
    if (!(given instanceof Tensor) && (given === null || typeof given !== "object" || !(Symbol.iterator in given)))
      throw new ValueError(
        `a param group's "params" must be a Tensor or an iterable of Tensors, but got ${describe(given)}`,
      );
    const params = given instanceof Tensor ? [given] : [...(given as Iterable<unknown>)];
    for (const p of params) {
      if (!(p instanceof Tensor))
        throw new ValueError(`optimizer can only optimize Tensors, but one of the params is ${describe(p)}`);
      if (!p.isLeaf) throw new ValueError("can't optimize a non-leaf Tensor; optimize the leaf it was computed from");
    }
    const group = { ...paramGroup, params } as unknown as ParamGroup<O>;
    const slots = group as Record<string, unknown>;
    for (const [name, value] of Object.entries(this.defaults)) {
      if (slots[name] !== undefined) continue;
      if (value === undefined)
        throw new ValueError(`parameter group didn't specify a value of required optimization parameter ${name}`);
      slots[name] = copyValue(value);
    }
    if (new Set(params).size !== params.length)
      process.emitWarning(
        "optimizer contains a parameter group with duplicate parameters; in future, this will cause an error",
        "UserWarning",
      );
    const seen = new Set(this.paramGroups.flatMap((g) => g.params));
    if ((params as Tensor[]).some((p) => seen.has(p)))
      throw new ValueError("some parameters appear in more than one parameter group");
    this.validateGroup(group);
    this.paramGroups.push(group);
  }

  /** The state of `p`, created empty on first use (torch's defaultdict). */
  protected stateOf(p: Tensor): ParamState {
    let s = this.state.get(p);
    if (s === undefined) {
      s = {};
      this.state.set(p, s);
    }
    return s;
  }

  /**
   * Clears every parameter's gradient: sets it to null (the default, as torch 2
   * does), or with setToNone = false zeroes it in place (torch 1.13's default).
   */
  zeroGrad(setToNone = true): void {
    for (const g of this.paramGroups) {
      for (const p of g.params) {
        const grad = peekGrad(p);
        if (grad === null) continue;
        if (setToNone) {
          // NB: its buffer goes back to the output pool when nothing outside the SDK read it (grad_slot.ts)
          dropGrad(p);
          continue;
        }
        if (grad.gradFn !== null) grad.detach_();
        else grad.requiresGrad_(false);
        noGrad(() => grad.zero_());
      }
    }
  }

  /**
   * Performs one optimization step. With a closure (which re-evaluates the
   * model and returns the loss), runs it with grad enabled first and returns
   * its value; an async closure makes step return a Promise.
   */
  step(): undefined;
  step<L>(closure: () => Promise<L>): Promise<L>;
  step<L>(closure: () => L): L;
  step<L>(closure?: () => L | Promise<L>): L | Promise<L> | undefined {
    if (closure === undefined) {
      noGrad(() => this.update());
      return undefined;
    }
    const loss = enableGrad(closure);
    if (loss instanceof Promise)
      return loss.then((l) => {
        noGrad(() => this.update());
        return l;
      });
    noGrad(() => this.update());
    return loss;
  }

  /**
   * The state as plain data, PyTorch's layout: parameters are replaced by their
   * index across all groups. NB: as in torch, state tensors are shared, not
   * copied; loadStateDict copies them.
   */
  stateDict(): OptimizerStateDict<O> {
    const index = new Map<Tensor, number>();
    let start = 0;
    const paramGroups = this.paramGroups.map((g) => {
      g.params.forEach((p, i) => {
        if (!index.has(p)) index.set(p, start + i);
      });
      start += g.params.length;
      const packed: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(g)) if (k !== "params") packed[k] = copyValue(v);
      packed.params = g.params.map((p) => index.get(p)!);
      return packed as ParamGroupState<O>;
    });
    const state: Record<number, ParamState> = {};
    for (const [p, s] of this.state) {
      const i = index.get(p);
      if (i !== undefined) state[i] = { ...s };
    }
    return { state, paramGroups };
  }

  /**
   * Restores state saved by stateDict() (of an optimizer over parameters of the
   * same shapes, in the same order). Tensors are copied and cast to their
   * parameter's float dtype (the step counter excepted).
   */
  loadStateDict(stateDict: OptimizerStateDict<O>): void {
    const saved = stateDict?.paramGroups;
    if (!Array.isArray(saved) || stateDict.state === null || typeof stateDict.state !== "object")
      throw new ValueError(
        'a state dict must be an object with "state" and "paramGroups" keys, as stateDict() returns',
      );
    if (saved.length !== this.paramGroups.length)
      throw new ValueError("loaded state dict has a different number of parameter groups");
    for (const [i, g] of saved.entries()) {
      if (!Array.isArray(g?.params) || g.params.length !== this.paramGroups[i]!.params.length)
        throw new ValueError(
          "loaded state dict contains a parameter group that doesn't match the size of optimizer's group",
        );
    }
    const byIndex = new Map<number, Tensor>();
    saved.forEach((g, i) => {
      g.params.forEach((k, j) => {
        byIndex.set(Number(k), this.paramGroups[i]!.params[j]!);
      });
    });
    const state = new Map<Tensor, ParamState>();
    for (const [key, entry] of Object.entries(stateDict.state)) {
      const p = byIndex.get(Number(key));
      if (p === undefined) continue; // NB: torch keeps such entries under their index; a Tensor-keyed map can't.
      const s: ParamState = {};
      for (const [name, v] of Object.entries(entry)) {
        if (!(v instanceof Tensor)) s[name] = v;
        else if (name !== "step" && p.isFloatingPoint()) s[name] = raw.copyAs(v, p.dtype);
        else s[name] = raw.copyAs(v);
      }
      state.set(p, s);
    }
    const groups = saved.map((g, i) => {
      const group: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(g)) group[k] = copyValue(v);
      group.params = this.paramGroups[i]!.params;
      return group as ParamGroup<O>;
    });
    for (const g of groups) this.validateGroup(g);
    this.state = state;
    this.paramGroups = groups;
  }

  /** The optimizer and its groups' hyperparameters, as torch prints them. */
  toString(): string {
    const lines = [`${this.constructor.name} (`];
    this.paramGroups.forEach((g, i) => {
      lines.push(`Parameter Group ${i}`);
      for (const k of Object.keys(g)
        .filter((k) => k !== "params")
        .sort())
        lines.push(`    ${k}: ${JSON.stringify((g as Record<string, unknown>)[k])}`);
    });
    lines.push(")");
    return lines.join("\n");
  }

  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }
}
