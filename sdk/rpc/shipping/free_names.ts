/**
 * Which names a shipped function or class captures from outside its own source, so that
 * code using a name the callee cannot resolve fails on the caller, before anything is sent.
 *
 * The source (an expression: source.ts wraps a function in parentheses, a method in an
 * object literal) is parsed by acorn (ESTree) and its scopes analysed by eslint-scope; the
 * global scope's `through` list holds every reference that no scope of the source binds
 * (parameters, var/let/const/class/function declarations, catch and for bindings, class
 * and function expression names). Of those references:
 * - `exports.NAME`, `exports?.NAME` and `exports["NAME"]` (tslab's form of a top-level name
 *   from an earlier cell) give NAME in `exportsRefs`; `exports` itself is never free;
 * - `arguments` (an arrow's, outside any function of the source) is never free;
 * - a name used only as `typeof NAME` is not free (that is legal on an undeclared name);
 * - a name bound by a function declaration in a block counts as bound (sloppy-mode code
 *   may call it from outside the block).
 * `this`, `super`, `new.target`, labels, property keys, member and private names are not
 * references at all. Both libraries load on first use (about 25 ms): a process that never
 * ships code never pays for them.
 */
import { createRequire } from "node:module";
import type { Program } from "acorn";
import type { Reference } from "eslint-scope";

export interface FreeNameScan {
  /** Bare names the source uses but does not declare. */
  free: Set<string>;
  /** NAME of every `exports.NAME` / `exports?.NAME` the source uses. */
  exportsRefs: Set<string>;
}

let libs: { acorn: typeof import("acorn"); eslintScope: typeof import("eslint-scope") } | undefined;

function load(): NonNullable<typeof libs> {
  if (!libs) {
    const require = createRequire(import.meta.url);
    libs = { acorn: require("acorn"), eslintScope: require("eslint-scope") };
  }
  return libs;
}

/** Parses a script (as V8 compiles a function's source: sloppy mode unless it says "use strict"). */
export function parseScript(src: string): Program {
  // NB: eslint-scope reads `range` (parameter defaults vs. the body).
  return load().acorn.parse(src, { ecmaVersion: "latest", sourceType: "script", ranges: true });
}

/** Free names and `exports.NAME` references of a function or class source (or any script). */
export function scanFreeNames(src: string): FreeNameScan {
  return freeNamesOf(parseScript(src), src);
}

/** Free names and `exports.NAME` references of the program that `parseScript(src)` gave. */
export function freeNamesOf(program: Program, src: string): FreeNameScan {
  // ecmaVersion: eslint-scope only tells ES5 from ES6+ (block scopes). ignoreEval: a direct eval()
  // must not turn every local of its function into a free name.
  const { analyze } = load().eslintScope;
  const manager = analyze(program as unknown as Parameters<typeof analyze>[0], {
    ecmaVersion: 2022,
    sourceType: "script",
    ignoreEval: true,
  });
  const blockFunctions = new Set<string>();
  for (const scope of manager.scopes)
    if (scope.type === "block" || scope.type === "switch")
      for (const v of scope.variables) if (v.defs.some((d) => d.type === "FunctionName")) blockFunctions.add(v.name);

  const through = manager.globalScope!.through;
  // Parents only where they matter (an `exports` member, a `typeof` operand): most sources skip the walk.
  const hasTypeof = src.includes("typeof");
  const wanted = new Set(through.filter((r) => hasTypeof || r.identifier.name === "exports").map(identifierOf));
  const parents = wanted.size > 0 ? parentsOf(program, wanted) : undefined;
  const free = new Set<string>();
  const exportsRefs = new Set<string>();
  for (const ref of through) {
    const id = identifierOf(ref);
    const parent = parents?.get(id);
    if (id.name === "exports") {
      const name = parent && exportsMember(parent, id);
      if (name !== undefined) exportsRefs.add(name);
    } else if (id.name === "arguments" || blockFunctions.has(id.name)) continue;
    else if (parent?.type === "UnaryExpression" && parent.operator === "typeof") continue;
    else free.add(id.name);
  }
  return { free, exportsRefs };
}

interface AnyNode {
  type: string;
  [key: string]: unknown;
}

function identifierOf(ref: Reference): AnyNode & { name: string } {
  return ref.identifier as unknown as AnyNode & { name: string };
}

/** NAME when `parent` is `exports.NAME`, `exports?.NAME` or `exports["NAME"]` with `id` as its object. */
function exportsMember(parent: AnyNode, id: AnyNode): string | undefined {
  if (parent.type !== "MemberExpression" || parent.object !== id) return undefined;
  const p = parent.property as AnyNode;
  if (!parent.computed && p.type === "Identifier") return p.name as string;
  if (parent.computed && p.type === "Literal" && typeof p.value === "string") return p.value;
  return undefined;
}

/** The parent of each node of `wanted`, by a walk over the tree under `root` that skips subtrees holding none. */
function parentsOf(root: Program, wanted: ReadonlySet<AnyNode>): Map<AnyNode, AnyNode> {
  const parents = new Map<AnyNode, AnyNode>();
  const starts = [...wanted].map((n) => n.start as number).sort((a, b) => a - b);
  /** Whether some wanted node starts within `node`. */
  const holdsWanted = (node: AnyNode) => {
    let lo = 0;
    for (let hi = starts.length; lo < hi;) {
      const mid = (lo + hi) >> 1;
      if (starts[mid] < (node.start as number)) lo = mid + 1;
      else hi = mid;
    }
    return lo < starts.length && starts[lo] < (node.end as number);
  };
  const visit = (child: unknown, parent: AnyNode) => {
    if (typeof child !== "object" || child === null || typeof (child as AnyNode).type !== "string") return;
    if (wanted.has(child as AnyNode)) parents.set(child as AnyNode, parent);
    else if (holdsWanted(child as AnyNode)) stack.push(child as AnyNode);
  };
  const stack: AnyNode[] = [root as unknown as AnyNode];
  while (stack.length > 0 && parents.size < wanted.size) {
    const node = stack.pop()!;
    for (const key in node) {
      const value = node[key];
      if (typeof value !== "object" || value === null) continue;
      if (Array.isArray(value)) for (const child of value) visit(child, node);
      else visit(value, node);
    }
  }
  return parents;
}
