/**
 * What both sides need about a function's source text: the expression that
 * evaluates to it (a method source is not an expression by itself), its free
 * names (cached per source), and which names every worker resolves on its own
 * (JavaScript and Node globals).
 */
import vm from "node:vm";
import { scanFreeNames, type FreeNameScan } from "./free_names.js";

export interface AnalyzedSource {
  source: string;
  /** An expression evaluating to the function or class. */
  expr: string;
  scan: FreeNameScan;
}

const NODE_GLOBALS = (
  "process Buffer console setTimeout clearTimeout setInterval clearInterval setImmediate clearImmediate " +
  "queueMicrotask structuredClone fetch URL URLSearchParams TextEncoder TextDecoder AbortController AbortSignal " +
  "performance crypto Blob File atob btoa EventTarget Event CustomEvent MessageChannel MessagePort MessageEvent " +
  "BroadcastChannel Headers Request Response FormData WebAssembly global globalThis navigator DOMException " +
  "ReadableStream WritableStream TransformStream CompressionStream DecompressionStream WebSocket undefined NaN Infinity"
).split(" ");

let standardGlobals: Set<string> | undefined;

/** JavaScript's own globals and Node's: present on every worker, never shipped. */
export function isStandardGlobal(name: string): boolean {
  if (!standardGlobals) {
    const js = vm.runInNewContext("Object.getOwnPropertyNames(globalThis)") as string[];
    standardGlobals = new Set([...js, ...NODE_GLOBALS]);
  }
  return standardGlobals.has(name);
}

const analyzed = new Map<string, AnalyzedSource | Error>();
const MAX_ANALYZED = 4096;

/** Thrown by `analyzeSource` for text that is not a function, class or method source. */
export class NotShippableSourceError extends Error {}

/**
 * Finds the expression form of `source` (`(source)`, or for a method
 * `name(...) { ... }` the method taken out of `({ source })`) and scans it.
 * Compiles with `new vm.Script` to check the syntax; never runs it.
 */
export function analyzeSource(source: string): AnalyzedSource {
  const hit = analyzed.get(source);
  if (hit instanceof Error) throw hit;
  if (hit) return hit;
  let result: AnalyzedSource | Error;
  if (/\{\s*\[native code\]\s*\}\s*$/.test(source))
    result = new NotShippableSourceError("it is a native or bound function (its source is not available)");
  else {
    const candidates = [`(${source}\n)`, `(function (o) { return o[Reflect.ownKeys(o)[0]]; })({${source}\n})`];
    const expr = candidates.find((c) => compiles(c));
    result = expr
      ? { source, expr, scan: scanFreeNames(expr) }
      : new NotShippableSourceError("its source is not a function, class or method expression");
  }
  if (analyzed.size >= MAX_ANALYZED) analyzed.delete(analyzed.keys().next().value as string);
  analyzed.set(source, result);
  if (result instanceof Error) throw result;
  return result;
}

function compiles(expr: string): boolean {
  try {
    new vm.Script(expr);
    return true;
  } catch {
    return false;
  }
}
