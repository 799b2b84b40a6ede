/**
 * Module: the base class of every layer and model, as torch.nn.Module.
 *
 * A subclass declares its parts as ordinary fields and assigns them in its
 * constructor; Module finds them by walking the object's own enumerable
 * properties in insertion order, so names read as in PyTorch ("fc.weight"):
 *
 *   class Net extends Module<[Tensor], Tensor> {
 *     fc = new Linear(4, 8);          // a submodule
 *     scale = new Parameter(ones([8])); // a parameter
 *     constructor() { super(); this.registerBuffer("runningMean", zeros([8])); }
 *     forward(x: Tensor): Tensor { return this.fc.forward(x).mul(this.scale); }
 *   }
 *
 * A property holding a `Parameter` is a parameter, one holding a `Module`
 * (ModuleList and Sequential included) a submodule; a plain Tensor is a
 * buffer only once `registerBuffer` names it (as in PyTorch, assigning a
 * plain tensor registers nothing). TypeScript cannot make instances callable,
 * so call `m.forward(x)` where PyTorch writes `m(x)`.
 */
import { DTypeError, ValueError } from "../errors/index.js";
import { noGrad } from "../autograd/grad_mode.js";
import { Device, type DeviceLike, assertDeviceUsable } from "../tensor/device.js";
import { type DType, DTYPES, isFloating } from "../tensor/dtype.js";
import { dropGrad, peekGrad } from "../autograd/grad_slot.js";
import { Tensor } from "../tensor/tensor.js";
import { Parameter } from "./parameter.js";
import { type LoadStateDictResult, loadStateEntries } from "./state_dict.js";

export type { LoadStateDictResult } from "./state_dict.js";

/** Any module, whatever its forward signature. */
export type AnyModule = Module<never[], unknown>;

type Slots = Record<string, unknown>;

export abstract class Module<Args extends unknown[] = unknown[], Out = unknown> {
  /** Train mode (dropout active) or eval mode; set with train() / eval(). */
  training = true;
  /** Buffer names, each with whether it belongs in the state dict. */
  readonly #buffers = new Map<string, boolean>();

  abstract forward(...args: Args): Out;

  // ---- registration -------------------------------------------------------

  /** Adds (or with null, declares) a parameter, as `this[name] = param`. */
  registerParameter(name: string, param: Parameter | null): void {
    this.#checkName(name, "parameter", (v) => v === null || v instanceof Parameter);
    if (param !== null && !(param instanceof Parameter))
      throw new ValueError(
        `cannot assign a plain Tensor to parameter '${name}' (a Parameter or null is required); wrap it: new Parameter(t)`,
      );
    this.#slots()[name] = param;
  }

  /** Adds a buffer: state that is not learned (running stats, masks). Non-persistent buffers stay out of stateDict(). */
  registerBuffer(name: string, tensor: Tensor | null, persistent = true): void {
    this.#checkName(name, "buffer", (v) => v === null || (v instanceof Tensor && !(v instanceof Parameter)));
    if (tensor !== null && !(tensor instanceof Tensor))
      throw new ValueError(
        `cannot assign '${typeof tensor}' object to buffer '${name}' (a Tensor or null is required)`,
      );
    this.#buffers.set(name, persistent);
    this.#slots()[name] = tensor;
  }

  /** Adds a submodule, as `this[name] = module`. */
  registerModule(name: string, module: AnyModule | null): void {
    this.#checkName(name, "module", (v) => v === null || v instanceof Module);
    if (module !== null && !(module instanceof Module))
      throw new ValueError(`${String(module)} is not a Module subclass`);
    this.#slots()[name] = module;
  }

  /** Alias of registerModule, as torch's add_module. */
  addModule(name: string, module: AnyModule | null): void {
    this.registerModule(name, module);
  }

  #slots(): Slots {
    return this as unknown as Slots;
  }

  #checkName(name: string, kind: string, sameKind: (v: unknown) => boolean): void {
    if (typeof name !== "string" || name === "") throw new ValueError(`${kind} name can't be empty string ""`);
    if (name.includes(".")) throw new ValueError(`${kind} name can't contain "." (got "${name}")`);
    const slots = this.#slots();
    // free: absent, or an own slot that is unset or already holds this kind (re-registration)
    const free =
      !(name in slots) || (Object.hasOwn(slots, name) && (slots[name] === undefined || sameKind(slots[name])));
    if (!free || (kind !== "buffer" && this.#buffers.has(name)))
      throw new ValueError(`attribute '${name}' already exists; pick another name for the ${kind}`);
  }

  // ---- traversal ----------------------------------------------------------

  #ownParameters(): [string, Parameter][] {
    return Object.entries(this).filter(
      (e): e is [string, Parameter] => e[1] instanceof Parameter && !this.#buffers.has(e[0]),
    );
  }

  #ownBuffers(persistentOnly: boolean): [string, Tensor][] {
    const slots = this.#slots();
    const out: [string, Tensor][] = [];
    for (const [name, persistent] of this.#buffers) {
      const t = slots[name];
      if (t instanceof Tensor && (persistent || !persistentOnly)) out.push([name, t]);
    }
    return out;
  }

  /** Direct submodules with their attribute names. */
  namedChildren(): [string, AnyModule][] {
    const seen = new Set<AnyModule>();
    const out: [string, AnyModule][] = [];
    for (const [name, v] of Object.entries(this))
      if (v instanceof Module && !seen.has(v)) {
        seen.add(v);
        out.push([name, v]);
      }
    return out;
  }

  children(): AnyModule[] {
    return this.namedChildren().map(([, m]) => m);
  }

  /** This module and every submodule (each once), depth first, with dotted names ("" for this one). */
  namedModules(prefix = "", removeDuplicate = true): [string, AnyModule][] {
    const out: [string, AnyModule][] = [];
    const seen = new Set<AnyModule>();
    const walk = (m: AnyModule, p: string): void => {
      if (removeDuplicate) {
        if (seen.has(m)) return;
        seen.add(m);
      }
      out.push([p, m]);
      for (const [name, child] of Object.entries(m))
        if (child instanceof Module) walk(child as AnyModule, p === "" ? name : `${p}.${name}`);
    };
    walk(this as unknown as AnyModule, prefix);
    return out;
  }

  modules(): AnyModule[] {
    return this.namedModules().map(([, m]) => m);
  }

  #collect<T>(own: (m: AnyModule) => [string, T][], prefix: string, recurse: boolean, dedupe: boolean): [string, T][] {
    const mods: [string, AnyModule][] = recurse
      ? this.namedModules(prefix, dedupe)
      : [[prefix, this as unknown as AnyModule]];
    const seen = new Set<T>();
    const out: [string, T][] = [];
    for (const [p, m] of mods)
      for (const [name, v] of own(m)) {
        if (dedupe) {
          if (seen.has(v)) continue;
          seen.add(v);
        }
        out.push([p === "" ? name : `${p}.${name}`, v]);
      }
    return out;
  }

  /** Parameters with dotted names, each once (a tied weight appears under its first name). */
  namedParameters(prefix = "", recurse = true): [string, Parameter][] {
    return this.#collect((m) => m.#ownParameters(), prefix, recurse, true);
  }

  parameters(recurse = true): Parameter[] {
    return this.namedParameters("", recurse).map(([, p]) => p);
  }

  namedBuffers(prefix = "", recurse = true): [string, Tensor][] {
    return this.#collect((m) => m.#ownBuffers(false), prefix, recurse, true);
  }

  buffers(recurse = true): Tensor[] {
    return this.namedBuffers("", recurse).map(([, b]) => b);
  }

  /** The submodule at a dotted path ("blocks.0.attn"), as torch's get_submodule. */
  getSubmodule(target: string): AnyModule {
    let m = this as unknown as AnyModule;
    if (target === "") return m;
    for (const part of target.split(".")) {
      const next = (m as unknown as Slots)[part];
      if (!(next instanceof Module))
        throw new ValueError(`${m.constructor.name} has no submodule \`${part}\` (looking up "${target}")`);
      m = next as AnyModule;
    }
    return m;
  }

  /** Total number of elements over the parameters (each counted once); trainableOnly skips frozen ones. */
  numParameters(trainableOnly = false): number {
    return this.parameters()
      .filter((p) => !trainableOnly || p.requiresGrad)
      .reduce((n, p) => n + p.numel(), 0);
  }

  // ---- modes and bulk updates ----------------------------------------------

  /** Sets train mode (true) or eval mode (false) here and in every submodule. */
  train(mode = true): this {
    if (typeof mode !== "boolean") throw new ValueError("training mode is expected to be boolean");
    this.training = mode;
    for (const c of this.children()) c.train(mode);
    return this;
  }

  eval(): this {
    return this.train(false);
  }

  /** Sets requiresGrad on every parameter (freeze with false). */
  requiresGrad_(requiresGrad = true): this {
    for (const p of this.parameters()) p.requiresGrad_(requiresGrad);
    return this;
  }

  /** Clears the parameters' gradients: to null (default), or zeroes them in place. */
  zeroGrad(setToNone = true): void {
    for (const p of this.parameters()) {
      const cur = peekGrad(p);
      if (!cur) continue;
      // NB: its buffer goes back to the output pool when nothing outside the SDK read it (grad_slot.ts)
      if (setToNone) dropGrad(p);
      else {
        const g = cur.gradFn ? cur.detach() : cur;
        if (g.requiresGrad) g.requiresGrad_(false);
        noGrad(() => g.zero_());
        p.grad = g;
      }
    }
  }

  /** Calls fn on every submodule (children first) and then on this one, as torch's apply. */
  apply(fn: (m: AnyModule) => void): this {
    for (const c of this.children()) c.apply(fn);
    fn(this as unknown as AnyModule);
    return this;
  }

  /**
   * Casts floating point parameters and buffers to `dtype`, or moves every
   * parameter and buffer to a device ("cpu", "cuda:1", 1, a Device; a CUDA
   * device without a viable CUDA backend gives the tensor layer's DeviceError).
   * NB: a cast or move replaces each Parameter by a new one (PyTorch swaps
   * `.data` under the same object), so build optimizers after calling to().
   */
  to(target: DType | DeviceLike): this {
    let change: (t: Tensor) => Tensor | null; // null: leave t as it is
    if (typeof target !== "string" || !(DTYPES as readonly string[]).includes(target)) {
      const device = Device.parse(target);
      assertDeviceUsable(device);
      change = (t) => (t.device.equals(device) ? null : noGrad(() => t.detach().to(device)));
    } else {
      const dtype = target as DType;
      if (!isFloating(dtype))
        throw new DTypeError(`Module.to() only accepts floating point dtypes, but got desired dtype=${dtype}`);
      change = (t) => (isFloating(t.dtype) && t.dtype !== dtype ? noGrad(() => t.detach().to(dtype)) : null);
    }
    const cast = (t: Tensor): Tensor => change(t) ?? t;
    // NB: one replacement per tensor, so a weight shared by two modules (tied) stays shared.
    const done = new Map<Tensor, Tensor>();
    const convert = <T extends Tensor>(t: T, make: (t: T) => Tensor): Tensor => {
      let r = done.get(t);
      if (!r) done.set(t, (r = make(t)));
      return r;
    };
    for (const m of this.modules()) {
      const slots = m as unknown as Slots;
      for (const [name, p] of m.#ownParameters())
        slots[name] = convert(p, (p0) => {
          const data = change(p0);
          if (data === null) return p0;
          const q = new Parameter(data, p0.requiresGrad);
          q.grad = p0.grad ? cast(p0.grad) : null;
          return q;
        });
      for (const [name, b] of m.#ownBuffers(false)) slots[name] = convert(b, cast);
    }
    return this;
  }

  float(): this {
    return this.to("float32");
  }

  double(): this {
    return this.to("float64");
  }

  // ---- state dict ---------------------------------------------------------

  #stateEntries(prefix: string, keepVars: boolean): [string, Tensor][] {
    const out: [string, Tensor][] = [];
    for (const [p, m] of this.namedModules(prefix)) {
      const name = (n: string): string => (p === "" ? n : `${p}.${n}`);
      for (const [n, t] of m.#ownParameters()) out.push([name(n), keepVars ? t : t.detach()]);
      for (const [n, t] of m.#ownBuffers(true)) out.push([name(n), keepVars ? t : t.detach()]);
    }
    return out;
  }

  /**
   * Parameters and persistent buffers by dotted name. Values are detached
   * tensors sharing storage with the module's (keepVars: the Parameters
   * themselves); a tied weight appears under each of its names, as in PyTorch.
   */
  stateDict(opts: { prefix?: string; keepVars?: boolean } = {}): Record<string, Tensor> {
    return Object.fromEntries(this.#stateEntries(opts.prefix ?? "", opts.keepVars ?? false));
  }

  /**
   * Copies `state` into the parameters and buffers in place (without
   * recording gradients). strict (default): every key must match, else a
   * ValueError lists the missing and unexpected keys, as PyTorch does. Shapes
   * must always match (ShapeError). Returns the keys that did not match.
   */
  loadStateDict(state: Readonly<Record<string, Tensor>>, strict = true): LoadStateDictResult {
    return loadStateEntries(this.constructor.name, this.#stateEntries("", true), state, strict);
  }

  // ---- printing -----------------------------------------------------------

  /** The module's own settings for toString(), e.g. "inFeatures=4, outFeatures=2, bias=true". */
  extraRepr(): string {
    return "";
  }

  /** A multi-line summary in PyTorch's module repr format. */
  toString(): string {
    const extra = this.extraRepr();
    const extraLines = extra ? extra.split("\n") : [];
    const childLines = Object.entries(this)
      .filter((e): e is [string, AnyModule] => e[1] instanceof Module)
      .map(([k, m]) => `(${k}): ${m.toString().split("\n").join("\n  ")}`);
    const lines = [...extraLines, ...childLines];
    let body = "";
    if (extraLines.length === 1 && childLines.length === 0) body = extraLines[0]!;
    else if (lines.length) body = `\n  ${lines.join("\n  ")}\n`;
    return `${this.constructor.name}(${body})`;
  }

  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }
}
