/**
 * What a cell that failed or was interrupted keeps, as Python keeps the names a
 * cell bound before its exception.
 *
 * tslab compiles a cell to CommonJS: a top-level declaration `const a = 1` becomes
 * `const a = 1; exports.a = a;`, so a name reaches the shared `exports` object (and
 * later cells) when its statement has run. TypeScript also emits one line
 * `exports.a = exports.f = ... = void 0;` first; the kernel removes it, so a name the
 * cell did not reach keeps its earlier value. The types later cells see come from
 * tslab's declaration text (`prevDecl`), which tslab only replaces after a cell that
 * succeeded. For a cell that failed, the kernel builds it here instead:
 *
 * 1. every declaration of the failed cell's output is kept, except those of the names
 *    it declares at run time (const, let, var, function, class, enum, namespace,
 *    import) whose statement did not run: those are dropped;
 * 2. a dropped name's earlier declaration (from before the cell) comes back, matching
 *    the earlier value it keeps;
 * 3. type-only declarations (interface, type) and ambient ones (`declare const x`)
 *    do not run and are kept whole, as in a cell that succeeded.
 *
 * "Ran" means the assignment to `exports.NAME` after its statement happened: a
 * function declared below the failing line is not kept (as a Python `def` below a
 * raise), even though JavaScript hoists it within the cell.
 */
import type * as TS from "typescript";

const EXPORT_INIT = /^exports\.[^\s=]+ = (?:exports\.[^\s=]+ = )*void 0;\n?/gm;

/** The names a compiled cell exports, and the compiled cell without its `= void 0` initialisation. */
export function splitExportInit(js: string): { names: string[]; js: string } {
  const names: string[] = [];
  const stripped = js.replace(EXPORT_INIT, (line) => {
    for (const m of line.matchAll(/exports\.([^\s=]+) = /g)) names.push(m[1]!);
    return "";
  });
  return { names, js: stripped };
}

/** Whether the compiled cell ever assigns `name` (an ambient `declare` never does). */
export function assignsExport(js: string, name: string): boolean {
  const n = name.replace(/[$]/g, "\\$");
  return new RegExp(`exports\\.${n}\\s*=[^=]|defineProperty\\(exports, "${n}"`).test(js);
}

interface Piece {
  /** The run-time name this piece declares; null for type-only and other statements. */
  name: string | null;
  text: string;
}

/** Splits declaration text into one piece per declared name. */
function pieces(ts: typeof TS, text: string): Piece[] {
  const sf = ts.createSourceFile("__decl__.d.ts", text, ts.ScriptTarget.Latest, true);
  const out: Piece[] = [];
  for (const st of sf.statements) {
    const full = st.getText(sf);
    if (ts.isVariableStatement(st)) {
      const list = st.declarationList;
      const kw = list.flags & ts.NodeFlags.Const ? "const" : list.flags & ts.NodeFlags.Let ? "let" : "var";
      const mods = (st.modifiers ?? []).map((m) => m.getText(sf)).join(" ");
      for (const d of list.declarations) {
        const name = ts.isIdentifier(d.name) ? d.name.text : null;
        out.push({ name, text: `${mods ? mods + " " : ""}${kw} ${d.getText(sf)};` });
      }
    } else if (ts.isImportDeclaration(st) && st.importClause && !st.importClause.isTypeOnly) {
      const c = st.importClause;
      const from = st.moduleSpecifier.getText(sf);
      if (c.name) out.push({ name: c.name.text, text: `import ${c.name.text} from ${from};` });
      const b = c.namedBindings;
      if (b && ts.isNamespaceImport(b))
        out.push({ name: b.name.text, text: `import * as ${b.name.text} from ${from};` });
      else if (b)
        for (const e of b.elements) out.push({ name: e.name.text, text: `import { ${e.getText(sf)} } from ${from};` });
    } else if (
      (ts.isFunctionDeclaration(st) ||
        ts.isClassDeclaration(st) ||
        ts.isEnumDeclaration(st) ||
        ts.isModuleDeclaration(st) ||
        ts.isImportEqualsDeclaration(st)) &&
      st.name &&
      ts.isIdentifier(st.name)
    ) {
      out.push({ name: st.name.text, text: full });
    } else {
      out.push({ name: null, text: full });
    }
  }
  return out;
}

/**
 * The declaration text after a failed cell: `next` (the cell's declarations with the earlier ones
 * it did not shadow, as tslab emits them) without the names in `dropped`, plus those names'
 * declarations from `prev` (the text before the cell).
 */
export function mergeDecls(ts: typeof TS, prev: string, next: string, dropped: ReadonlySet<string>): string {
  if (dropped.size === 0) return next;
  const kept = pieces(ts, next).filter((p) => p.name === null || !dropped.has(p.name));
  const restored = pieces(ts, prev).filter((p) => p.name !== null && dropped.has(p.name));
  return [...kept, ...restored].map((p) => p.text).join("\n") + "\n";
}
