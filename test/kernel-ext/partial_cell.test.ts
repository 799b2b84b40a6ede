/**
 * kernel-ext/partial_cell.ts on the JavaScript and declarations tslab emits: the export
 * initialisation line is removed and its names listed; an ambient name is never assigned;
 * the declarations after a failed cell drop the names whose statements did not run and bring
 * back their earlier declarations, keeping type-only ones and the others' pieces.
 */
import * as ts from "typescript";
import { describe, expect, it } from "vitest";
import { assignsExport, mergeDecls, splitExportInit } from "../../kernel-ext/partial_cell.js";

describe("partial cells", () => {
  it("splitExportInit removes the `= void 0` line and lists its names", () => {
    const js = [
      'Object.defineProperty(exports, "__esModule", { value: true });',
      "exports.b = exports.a = void 0;",
      "exports.$c = void 0;",
      "const a = 1;",
      "exports.a = a;",
    ].join("\n");
    const r = splitExportInit(js);
    expect(r.names).toEqual(["b", "a", "$c"]);
    expect(r.js).not.toContain("void 0");
    expect(r.js).toContain("exports.a = a;");
    expect(assignsExport(r.js, "a")).toBe(true);
    expect(assignsExport(r.js, "b")).toBe(false); // e.g. `declare const b: number`
    expect(assignsExport('Object.defineProperty(exports, "join", { get() {} })', "join")).toBe(true);
  });

  it("mergeDecls drops what did not run, restores its earlier declaration and keeps the rest", () => {
    const prev = ["declare let later: string;", "declare const keep = 0;", 'import * as fs from "fs";', ""].join("\n");
    const next = [
      'import { join, resolve } from "path";',
      "declare const a = 1, later = 5;",
      "declare function g(x: number): string;",
      "declare function g(x: string): string;",
      "interface Shape {\n    w: number;\n}",
      "declare class Box {\n}",
      "declare const keep = 0;",
      'import * as fs from "fs";',
      "",
    ].join("\n");
    const out = mergeDecls(ts, prev, next, new Set(["later", "g", "resolve", "Box"]));
    expect(out).toContain('import { join } from "path";');
    expect(out).not.toContain("resolve");
    expect(out).toContain("declare const a = 1;");
    expect(out).not.toContain("later = 5");
    expect(out).toContain("declare let later: string;");
    expect(out).not.toContain("function g");
    expect(out).not.toContain("class Box");
    expect(out).toContain("interface Shape");
    expect(out.match(/declare const keep = 0;/g)).toHaveLength(1);
    expect(out.match(/import \* as fs/g)).toHaveLength(1);
    expect(mergeDecls(ts, prev, next, new Set())).toBe(next);
  });
});
