/**
 * Callee side: turns a `TargetRecord` from the wire back into the function or class to call.
 *
 * - builtin: the value at that path on this worker's SDK;
 * - registered: `registry.lookup(name)`;
 * - global: a standard JavaScript built-in by its path ("Math.min"; ./globals.ts);
 * - module: `importModule(path)`, then the named export (`default` without `#`);
 * - source: the cached compiled value for (peer, hash), else compiled now (see `compileShipped`).
 *
 * Async functions come back as they are: the agent awaits what a call returns.
 */
import { pathToFileURL } from "node:url";
import path from "node:path";
import { ProtocolError } from "../../errors/index.js";
import { debug } from "../../util/index.js";
import { BuiltinIndex } from "./builtins.js";
import type { ShippedCodeCache } from "./cache.js";
import { compileShipped } from "./compile.js";
import { globalAt } from "./globals.js";
import { ShippedCodeMissingError, UnknownTargetError } from "./errors.js";
import { hasCode, hashSource, parseTargetRecord } from "./record.js";
import type { Registry } from "./registry.js";

export interface MaterializeContext {
  /** This worker's SDK namespace (`import * as tprpc`), received at run time. */
  sdk: Readonly<Record<string, unknown>>;
  registry: Registry;
  /** Loads a module reference (default: dynamic `import()`, relative paths from the working directory). */
  importModule?: (specifier: string) => Promise<unknown>;
  /** Compiled code per peer; without one, every source record compiles. */
  cache?: ShippedCodeCache;
  /** The caller's worker name (the cache key). */
  peer?: string;
  /** This worker's name, for messages. */
  workerName?: string;
}

/** The function or class a record names on this worker. `record` may come straight off the wire. */
export async function materializeTarget(record: unknown, ctx: MaterializeContext): Promise<unknown> {
  return materializeTargetNow(record, ctx);
}

/**
 * materializeTarget without a detour through the microtask queue: the value itself (or a throw) for
 * every kind but `module`, which gives a Promise (it imports). The callee starts a call's target in the
 * same turn it takes the call from its queue (../serve_queue.ts), so it can tell what that turn cost.
 */
export function materializeTargetNow(record: unknown, ctx: MaterializeContext): unknown {
  const r = parseTargetRecord(record);
  const where = ctx.workerName ? `worker ${JSON.stringify(ctx.workerName)}` : "this worker";
  switch (r.kind) {
    case "builtin":
      return BuiltinIndex.of(ctx.sdk).resolve(r.name);
    case "registered":
      if (!ctx.registry.has(r.name))
        throw new UnknownTargetError(
          `Nothing is registered as ${JSON.stringify(r.name)} on ${where}: call ` +
            `rpc.register(${JSON.stringify(r.name)}, fnOrClass) on every worker before calling it by name.`,
        );
      return ctx.registry.lookup(r.name);
    case "global": {
      const fn = globalAt(r.name);
      if (!fn)
        throw new UnknownTargetError(
          `${JSON.stringify(r.name)} is not a standard JavaScript built-in on ${where}: only the functions of ` +
            "Math, JSON, Number, String, Object, Array, Reflect, Date, BigInt and the global functions go by path",
        );
      return fn;
    }
    case "module":
      return importExport(r.ref, ctx.importModule ?? defaultImport, where);
    case "source": {
      const peer = ctx.peer ?? "";
      const hit = ctx.cache?.lookup(peer, r.hash);
      if (hit) return hit.value;
      if (!hasCode(r)) throw new ShippedCodeMissingError(r.hash);
      if (hashSource(r.source, r.deps) !== r.hash)
        throw new ProtocolError("Shipped code does not match its hash: check that every worker runs the same tprpc.");
      const value = compileShipped(r, { sdk: ctx.sdk, registry: ctx.registry, workerName: ctx.workerName });
      debug(2, "shipping", `compiled ${r.hash.slice(0, 12)} from ${JSON.stringify(peer)}`);
      if (ctx.cache) {
        ctx.cache.compilations++;
        ctx.cache.store(peer, r.hash, value);
      }
      return value;
    }
  }
}

async function importExport(ref: string, importModule: (s: string) => Promise<unknown>, where: string) {
  const hash = ref.lastIndexOf("#");
  const spec = hash < 0 ? ref : ref.slice(0, hash);
  const name = hash < 0 ? "default" : ref.slice(hash + 1);
  let mod: unknown;
  try {
    mod = await importModule(spec);
  } catch (e) {
    throw new UnknownTargetError(
      `Cannot load module ${JSON.stringify(spec)} on ${where} (${(e as Error).message}): ` +
        `the path must resolve on the callee; use an absolute path or a package name installed on every worker.`,
    );
  }
  const exports = mod as Record<string, unknown> | null;
  if (exports === null || typeof exports !== "object" || !Object.prototype.hasOwnProperty.call(exports, name)) {
    const have = exports && typeof exports === "object" ? Object.keys(exports).slice(0, 20).join(", ") : "";
    throw new UnknownTargetError(
      `Module ${JSON.stringify(spec)} on ${where} has no export ${JSON.stringify(name)}` +
        (have ? ` (it exports: ${have})` : "") +
        `: check the name after "#".`,
    );
  }
  return exports[name];
}

function defaultImport(spec: string): Promise<unknown> {
  const isPath = spec.startsWith(".") || path.isAbsolute(spec);
  return import(isPath ? pathToFileURL(path.resolve(spec)).href : spec);
}
