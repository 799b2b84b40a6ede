/**
 * Caller side: turns a call target into a wire-safe `TargetRecord`.
 *
 * 1. An SDK function or class (found in the `BuiltinIndex`) goes by its path: `{ kind: "builtin", name: "nn.Linear" }`.
 * 2. A registered one goes by its registered name: `{ kind: "registered", name }`.
 * 3. A string is a module reference `"path/to/module.js#export"` when it has a `#` or ends in .js/.mjs/.cjs,
 *    otherwise a registered name (or a builtin path when nothing is registered under it here).
 * 4. A standard JavaScript built-in (Math.min, JSON.stringify, parseInt) goes by its global path:
 *    `{ kind: "global", name: "Math.min" }` (./globals.ts).
 * 5. Any other function or class is shipped by source: `Function.prototype.toString()` plus every
 *    dependency it reaches through tslab's `exports.NAME` or through a bare name found on `scope`:
 *    functions and classes as source (recursively, each once), SDK and registered values by name,
 *    plain data by value. A name found nowhere (a closure variable, a module-local import)
 *    throws `UnresolvedNameError` here, before anything is sent.
 */
import { BuiltinIndex } from "./builtins.js";
import { globalPathOf } from "./globals.js";
import { UnresolvedNameError, UnshippableValueError } from "./errors.js";
import {
  describeValue,
  hashSource,
  SCOPE_NAMES,
  isBindableName,
  toPlainData,
  type DepRecord,
  type TargetRecord,
} from "./record.js";
import type { Registry } from "./registry.js";
import { analyzeSource, isStandardGlobal, NotShippableSourceError, type AnalyzedSource } from "./source.js";

export type CallTarget = Function | string;

export interface DescribeContext {
  /** The caller's SDK index: `BuiltinIndex.of(tprpcNamespace)`. */
  builtins: BuiltinIndex;
  registry: Registry;
  /**
   * Where top-level names live: tslab's `exports` object in a notebook, `globalThis` in a script
   * (the default). `exports.NAME` and bare free names are looked up here.
   */
  scope?: object;
  /** "throw" (default): an unresolvable free name fails here; "defer": leave it to the callee. */
  unresolved?: "throw" | "defer";
}

const MODULE_RE = /#|\.[cm]?js$/;

export function describeTarget(target: CallTarget, ctx: DescribeContext): TargetRecord {
  if (typeof target === "string") {
    if (MODULE_RE.test(target)) return { kind: "module", ref: target };
    if (!ctx.registry.has(target) && ctx.builtins.has(target) && target !== "")
      return { kind: "builtin", name: target };
    return { kind: "registered", name: target };
  }
  if (typeof target !== "function")
    throw new UnshippableValueError(
      "target",
      "rpc call",
      `which is ${describeValue(target)}: a call target is a function, a class or a "module.js#export" string`,
    );
  const builtin = ctx.builtins.nameOf(target);
  if (builtin !== undefined && builtin !== "") return { kind: "builtin", name: builtin };
  const registered = ctx.registry.nameOf(target);
  if (registered !== undefined) return { kind: "registered", name: registered };
  const global = globalPathOf(target);
  if (global !== undefined) return { kind: "global", name: global };
  return describeSource(target, ctx);
}

function describeSource(target: Function, ctx: DescribeContext): TargetRecord {
  const scope = (ctx.scope ?? globalThis) as Record<string, unknown>;
  const deps: Record<string, DepRecord> = {};
  const throwUnresolved = (ctx.unresolved ?? "throw") === "throw";

  const visit = (a: AnalyzedSource, owner: string) => {
    for (const name of a.scan.exportsRefs) addDep(name, owner);
    for (const name of a.scan.free) {
      if (SCOPE_NAMES.has(name) || Object.prototype.hasOwnProperty.call(deps, name) || isStandardGlobal(name)) continue;
      if (Object.prototype.hasOwnProperty.call(scope, name)) addDep(name, owner);
      else if (ctx.builtins.topLevelNames.has(name) || ctx.registry.has(name) || name in globalThis) continue;
      else if (throwUnresolved) throw new UnresolvedNameError(name, owner, "caller");
    }
  };
  const addDep = (name: string, owner: string) => {
    if (Object.prototype.hasOwnProperty.call(deps, name) || SCOPE_NAMES.has(name)) return;
    if (!Object.prototype.hasOwnProperty.call(scope, name)) {
      if (!throwUnresolved) return;
      throw new UnresolvedNameError(name, owner, "caller");
    }
    if (!isBindableName(name))
      throw new UnshippableValueError(name, owner, "whose name is a reserved word and cannot be bound on the callee");
    const value = scope[name];
    const builtin = ctx.builtins.nameOf(value);
    const registered = ctx.registry.nameOf(value);
    if (builtin !== undefined) deps[name] = { kind: "builtin", name: builtin };
    else if (registered !== undefined) deps[name] = { kind: "registered", name: registered };
    else if (typeof value === "function") {
      const a = analyze(value, name, owner);
      deps[name] = { kind: "source", source: a.source }; // NB: set before visiting, so cycles end here
      visit(a, name);
    } else {
      const plain = toPlainData(value);
      if (!plain.ok)
        throw new UnshippableValueError(
          name,
          owner,
          `which ${plain.reason}; tensors and other objects travel as arguments`,
        );
      deps[name] = { kind: "value", value: plain.value };
    }
  };

  const name = target.name || "<anonymous>";
  const main = analyze(target, name, name);
  visit(main, name);
  const sorted: Record<string, DepRecord> = {};
  for (const k of Object.keys(deps).sort()) sorted[k] = deps[k];
  return { kind: "source", hash: hashSource(main.source, sorted), source: main.source, deps: sorted };
}

function analyze(fn: Function, identifier: string, owner: string): AnalyzedSource {
  try {
    return analyzeSource(Function.prototype.toString.call(fn));
  } catch (e) {
    if (!(e instanceof NotShippableSourceError)) throw e;
    const why = identifier === owner ? `because ${e.message}` : `which cannot be shipped because ${e.message}`;
    throw new UnshippableValueError(identifier, owner, why);
  }
}
