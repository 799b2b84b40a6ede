/**
 * What both sides need about a function's source text: the expression that
 * evaluates to it (a method source is not an expression by itself), its free
 * names (cached per source), and which names every worker resolves on its own
 * (JavaScript and Node globals). The source is parsed once (acorn, ./free_names.ts);
 * only a single function, class or method expression is accepted, so the expression
 * can be embedded in generated code (./compile.ts) with nothing else riding along.
 */
import vm from "node:vm";
import type { Program } from "acorn";
import { freeNamesOf, parseScript, type FreeNameScan } from "./free_names.js";

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
 * Parses only; never runs it.
 */
export function analyzeSource(source: string): AnalyzedSource {
  const hit = analyzed.get(source);
  if (hit instanceof Error) throw hit;
  if (hit) return hit;
  let result: AnalyzedSource | Error | undefined;
  if (/\{\s*\[native code\]\s*\}\s*$/.test(source))
    result = new NotShippableSourceError("it is a native or bound function (its source is not available)");
  else {
    const candidates: [string, (p: Program) => boolean][] = [
      [`(${source}\n)`, isFunctionExpression],
      [`(function (o) { return o[Reflect.ownKeys(o)[0]]; })({${source}\n})`, isMethodTakenOut],
    ];
    let parsedOne = false;
    for (const [expr, shapeOk] of candidates) {
      const program = parseOrUndefined(expr);
      parsedOne ||= program !== undefined;
      if (program && shapeOk(program)) {
        result = { source, expr, scan: freeNamesOf(program, expr) };
        break;
      }
    }
    // NB: V8 compiled this source (it came from a live function) unless it came off the wire.
    result ??= new NotShippableSourceError(
      !parsedOne && candidates.some(([expr]) => compiles(expr))
        ? "its source uses syntax that the free-name analysis (acorn) cannot parse"
        : "its source is not a function, class or method expression",
    );
  }
  if (analyzed.size >= MAX_ANALYZED) analyzed.delete(analyzed.keys().next().value as string);
  analyzed.set(source, result);
  if (result instanceof Error) throw result;
  return result;
}

function parseOrUndefined(expr: string): Program | undefined {
  try {
    return parseScript(expr);
  } catch (e) {
    if (e instanceof SyntaxError) return undefined;
    throw e;
  }
}

type Node = { type: string; [key: string]: unknown };

/** The one expression of a program made of a single expression statement. */
function soleExpression(program: Program): Node | undefined {
  const [first, ...rest] = program.body as unknown as Node[];
  return first?.type === "ExpressionStatement" && rest.length === 0 ? (first.expression as Node) : undefined;
}

/** `(function ...)`, `(async (x) => ...)`, `(class ...)` and nothing more. */
function isFunctionExpression(program: Program): boolean {
  const e = soleExpression(program);
  return e?.type === "FunctionExpression" || e?.type === "ArrowFunctionExpression" || e?.type === "ClassExpression";
}

/** The method wrapper around an object literal holding exactly one method, getter or setter. */
function isMethodTakenOut(program: Program): boolean {
  const call = soleExpression(program);
  const arg = call?.type === "CallExpression" ? (call.arguments as Node[])[0] : undefined;
  const props = arg?.type === "ObjectExpression" ? (arg.properties as Node[]) : [];
  return props.length === 1 && props[0].type === "Property" && (props[0].method === true || props[0].kind !== "init");
}

function compiles(expr: string): boolean {
  try {
    new vm.Script(expr);
    return true;
  } catch {
    return false;
  }
}
