/**
 * Shorthand properties written out in full before tslab compiles a cell.
 *
 * tslab compiles a name declared by an earlier cell to `exports.NAME` (converter.js's
 * wrapPrevIdentifier: each identifier whose symbol is declared in the earlier cells'
 * declarations). For the name of a shorthand property, `{ aa }` or the assignment target
 * `({ aa } = o)`, the checker gives the property's symbol, not the variable's, so the
 * identifier stayed a bare `aa`: a ReferenceError in an object literal, and a silent
 * assignment to a global `aa` in a destructuring assignment. Written as `{ aa: aa }` (and
 * `{ aa: aa = d }` for a default), the value is an ordinary reference that tslab rewrites.
 * The two forms mean the same in every scope (a local `aa` still wins), so every shorthand
 * property is expanded; nothing else in the cell changes, and no line moves.
 */
import type * as TS from "typescript";

/** `src` with each shorthand property `name` (or `name = default`) written `name: name`. */
export function expandShorthand(ts: typeof TS, src: string): string {
  if (!src.includes("{")) return src;
  const sf = ts.createSourceFile("__cell__.ts", src, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const at: { pos: number; text: string }[] = [];
  const visit = (node: TS.Node): void => {
    if (ts.isShorthandPropertyAssignment(node)) at.push({ pos: node.name.end, text: `: ${node.name.getText(sf)}` });
    ts.forEachChild(node, visit);
  };
  visit(sf);
  if (at.length === 0) return src;
  at.sort((a, b) => a.pos - b.pos);
  let out = "";
  let from = 0;
  for (const { pos, text } of at) {
    out += src.slice(from, pos) + text;
    from = pos;
  }
  return out + src.slice(from);
}
