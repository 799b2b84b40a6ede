/**
 * Compiles a shipped source record on the callee, in the main V8 context (so a
 * shipped `class X extends nn.Module` extends this worker's real `nn.Module` and
 * `instanceof` holds), with these names in scope:
 *
 * - `tprpc`: the SDK namespace, and every SDK export by its own name (`nn`, `zeros`, ...);
 * - every name registered with `rpc.register` that is an identifier;
 * - the shipped dependencies, by their names and as `exports.NAME` (tslab's form);
 * - no `require` or `module`.
 *
 * 1. Resolve the dependencies (builtins, registered values, plain data by value).
 * 2. Scan every shipped source for free names; one that none of the above nor a global
 *    provides throws `UnresolvedNameError` before anything runs.
 * 3. Build one factory `(function (tprpc, exports, deps, ...names) { const dep = ...; return (source); })`,
 *    dependencies declared so that one referenced by another comes first (a base class before
 *    the class extending it); run it with `vm.Script.runInThisContext`.
 * 4. Remember the dependencies as the scope of the compiled function and of each shipped
 *    dependency (shippedScopeOf), so this worker can ship them on (a nested call forwarding
 *    code that came with its helpers finds them there).
 */
import vm from "node:vm";
import { BuiltinIndex } from "./builtins.js";
import { UnknownTargetError, UnresolvedNameError } from "./errors.js";
import { isBindableName, SCOPE_NAMES, type SourceRecord } from "./record.js";
import type { Registry } from "./registry.js";
import { analyzeSource, NotShippableSourceError, type AnalyzedSource } from "./source.js";

export interface CompileContext {
  sdk: Readonly<Record<string, unknown>>;
  registry: Registry;
  workerName?: string;
}

const DEPS = "__tprpc_deps__";

const shippedScopes = new WeakMap<object, object>();

/** The names a function compiled here from shipped code was compiled with (its dependencies), or undefined. */
export function shippedScopeOf(fn: unknown): object | undefined {
  return typeof fn === "function" || (typeof fn === "object" && fn !== null) ? shippedScopes.get(fn) : undefined;
}

export function compileShipped(record: SourceRecord, ctx: CompileContext): unknown {
  const builtins = BuiltinIndex.of(ctx.sdk);
  const depNames = Object.keys(record.deps);
  const values: Record<string, unknown> = Object.create(null);
  const sources = new Map<string, AnalyzedSource>();
  for (const name of depNames) {
    const d = record.deps[name];
    if (d.kind === "source") sources.set(name, analyze(d.source, name));
    else if (d.kind === "value") values[name] = d.value;
    else if (d.kind === "builtin") values[name] = builtins.resolve(d.name);
    else if (!ctx.registry.has(d.name))
      throw new UnknownTargetError(
        `Shipped code uses ${JSON.stringify(name)}, registered on the caller as ${JSON.stringify(d.name)} but not on ` +
          `${ctx.workerName ? `worker ${JSON.stringify(ctx.workerName)}` : "this worker"}: ` +
          `call rpc.register(${JSON.stringify(d.name)}, value) on every worker.`,
      );
    else values[name] = ctx.registry.lookup(d.name);
  }
  const mainName = functionName(record.source);
  const main = analyze(record.source, mainName);

  // Names in scope: SDK exports, then registered names over them, then dependencies over both.
  const bound = new Map<string, unknown>();
  for (const name of builtins.topLevelNames) if (isBindableName(name)) bound.set(name, ctx.sdk[name]);
  for (const name of ctx.registry.names()) if (isBindableName(name)) bound.set(name, ctx.registry.lookup(name));
  for (const name of [...SCOPE_NAMES, ...depNames]) bound.delete(name);
  const provided = (name: string) =>
    name === "tprpc" ||
    bound.has(name) ||
    Object.prototype.hasOwnProperty.call(record.deps, name) ||
    name in globalThis;
  const check = (a: AnalyzedSource, owner: string) => {
    for (const name of a.scan.free) if (!provided(name)) throw new UnresolvedNameError(name, owner, "callee");
    for (const name of a.scan.exportsRefs)
      if (name !== "tprpc" && !Object.prototype.hasOwnProperty.call(record.deps, name))
        throw new UnresolvedNameError(name, owner, "callee");
  };
  check(main, mainName);
  for (const [name, a] of sources) check(a, name);

  const body: string[] = [];
  for (const name of depNames)
    if (!sources.has(name)) body.push(`const ${name} = ${DEPS}.${name}; exports.${name} = ${name};`);
  for (const name of dependencyOrder(sources))
    body.push(`const ${name} = ${sources.get(name)!.expr}; exports.${name} = ${name};`);
  body.push(`return ${main.expr};`);
  const params = ["tprpc", "exports", DEPS, ...bound.keys()];
  const code = `(function (${params.join(", ")}) {\n${body.join("\n")}\n})`;
  const filename = `tprpc-shipped/${mainName.replace(/[^\w$-]/g, "_")}-${record.hash.slice(0, 12)}.js`;
  const factory = new vm.Script(code, { filename }).runInThisContext() as (...args: unknown[]) => unknown;
  const exportsObject: Record<string, unknown> = { tprpc: ctx.sdk };
  const compiled = factory(ctx.sdk, exportsObject, values, ...bound.values());
  // NB: `tprpc` is not a dependency: the next callee binds its own SDK under that name
  const scope: Record<string, unknown> = Object.create(null);
  for (const name of depNames) scope[name] = exportsObject[name];
  for (const v of [compiled, ...sources.keys()].map((n) => (typeof n === "string" ? scope[n] : n)))
    if (typeof v === "function") shippedScopes.set(v, scope);
  return compiled;
}

/** Rewrites a `ReferenceError: X is not defined` thrown by shipped code into an `UnresolvedNameError` naming X. */
export function explainReferenceError(err: unknown, targetName = "<shipped code>"): unknown {
  if (!(err instanceof ReferenceError)) return err;
  const m = /^(\S+) is not defined$/.exec(err.message);
  if (!m) return err;
  const e = new UnresolvedNameError(m[1], targetName, "callee");
  e.stack = `${e.name}: ${e.message}\n${(err.stack ?? "").split("\n").slice(1).join("\n")}`;
  return e;
}

/** The declared name of a function or class source, for messages and file names. */
export function functionName(source: string): string {
  const m =
    /^\s*(?:async\s+)?function\s*\*?\s*([\p{ID_Start}$_][\p{ID_Continue}$]*)/u.exec(source) ??
    /^\s*class\s+(?!extends\b)([\p{ID_Start}$_][\p{ID_Continue}$]*)/u.exec(source) ??
    /^\s*(?:static\s+|async\s+|get\s+|set\s+|\*\s*)*([\p{ID_Start}$_][\p{ID_Continue}$]*)\s*\(/u.exec(source);
  return m ? m[1] : "<anonymous>";
}

function analyze(source: string, name: string): AnalyzedSource {
  try {
    return analyzeSource(source);
  } catch (e) {
    if (e instanceof NotShippableSourceError)
      throw new UnknownTargetError(`Shipped ${JSON.stringify(name)} does not compile on this worker: ${e.message}.`);
    throw e;
  }
}

/** Dependencies after those they reference (depth first, post order; a cycle is cut where it closes). */
function dependencyOrder(sources: Map<string, AnalyzedSource>): string[] {
  const order: string[] = [];
  const state = new Map<string, "visiting" | "done">();
  const visit = (name: string) => {
    if (state.has(name)) return;
    state.set(name, "visiting");
    const a = sources.get(name)!;
    for (const ref of [...a.scan.exportsRefs, ...a.scan.free]) if (sources.has(ref)) visit(ref);
    state.set(name, "done");
    order.push(name);
  };
  for (const name of [...sources.keys()].sort()) visit(name);
  return order;
}
