/**
 * kernel-ext/shorthand.ts: every shorthand property (object literal, destructuring assignment,
 * with a default) is written `name: name`, nothing else moves; and through tslab's own
 * converter, an earlier cell's name in a shorthand property compiles to `exports.NAME`
 * once expanded, where the bare shorthand stayed a free name.
 */
import { createRequire } from "node:module";
import * as ts from "typescript";
import { afterAll, describe, expect, it } from "vitest";
import { expandShorthand } from "../../kernel-ext/shorthand.js";

const require = createRequire(import.meta.url);

interface TslabConverter {
  convert(prevDecl: string, src: string): { output?: string; diagnostics: unknown[] };
  close(): void;
}
const { createConverter } = require(
  require.resolve("tslab/dist/converter.js", {
    paths: [require.resolve("tprpc-kernel/package.json")],
  }),
) as { createConverter: () => TslabConverter };

describe("expandShorthand", () => {
  it("writes out shorthand properties and their defaults, leaving the rest as typed", () => {
    expect(expandShorthand(ts, "const o = { aa, bb: 2, ...cc, [dd]: 1, ee() {}, get ff() { return 1; } };")).toBe(
      "const o = { aa: aa, bb: 2, ...cc, [dd]: 1, ee() {}, get ff() { return 1; } };",
    );
    expect(expandShorthand(ts, "({ aa, bb = 3 } = o);")).toBe("({ aa: aa, bb: bb = 3 } = o);");
    expect(expandShorthand(ts, "const f = () => ({ x: { aa } });\nclass C { v = { aa }; }")).toBe(
      "const f = () => ({ x: { aa: aa } });\nclass C { v = { aa: aa }; }",
    );
  });

  it("leaves binding patterns, types, labels and text without shorthand alone", () => {
    for (const src of [
      "const { aa, bb = aa } = o;",
      "function f({ aa = 1 }: { aa?: number }) { return aa; }",
      "type T = { aa: number };",
      "aa: for (;;) break aa;",
      'const s = "{ aa }"; // { bb }',
      "1 + 1",
    ])
      expect(expandShorthand(ts, src)).toBe(src);
  });
});

describe("tslab's converter on an earlier cell's name in a shorthand property", () => {
  const conv = createConverter();
  afterAll(() => conv.close());
  const prev = "declare const aa = 1;\ndeclare let bb: number;\n";

  it("compiles to `exports.NAME` once expanded (the bare shorthand stayed a free name)", () => {
    const bare = conv.convert(prev, "const o = { aa };\n({ bb } = { bb: 2 });\n");
    expect(bare.diagnostics).toEqual([]);
    expect(bare.output).toMatch(/\{ aa \}/); // tslab's own output: a ReferenceError at run time
    const fixed = conv.convert(prev, expandShorthand(ts, "const o = { aa };\n({ bb } = { bb: 2 });\n"));
    expect(fixed.diagnostics).toEqual([]);
    expect(fixed.output).toContain("{ aa: exports.aa }");
    expect(fixed.output).toContain("({ bb: exports.bb } = { bb: 2 })");
  });
});
