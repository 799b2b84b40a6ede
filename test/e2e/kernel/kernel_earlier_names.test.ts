/**
 * A later cell uses an earlier cell's names in every syntactic position, under a real Jupyter
 * server: tslab compiles such a name to `exports.NAME`, and a shorthand property `{ aa }` (in an
 * object literal or a destructuring assignment) must become `{ aa: exports.aa }`, not stay a free
 * `aa` (a ReferenceError at run time). Skipped where no Python has jupyter_server.
 */
import { type Kernel } from "@jupyterlab/services";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exec, hasJupyter, type KernelSession, openKernel } from "./helpers.js";

describe.skipIf(!hasJupyter)("tprpc kernel: an earlier cell's names in a later cell (e2e)", () => {
  let session: KernelSession | undefined;
  let k: Kernel.IKernelConnection;

  beforeAll(async () => {
    session = await openKernel();
    k = session.kernel;
  }, 120_000);

  afterAll(async () => {
    await session?.close();
  });

  /** Runs `code` and returns its text/plain result, failing with the whole reply otherwise. */
  async function value(code: string): Promise<string | undefined> {
    const r = await exec(k, code);
    expect(r.status, `${code}\n${JSON.stringify(r)}`).toBe("ok");
    return r.result;
  }

  it("shorthand properties, destructuring, class fields, labels and methods see an earlier cell's names", async () => {
    await value(
      'const aa = 1;\nlet bb = 2;\nfunction gg(): string { return "g"; }\nimport * as nodePath from "node:path";',
    );
    const cases: [string, string][] = [
      ["const o = { aa };\no", "{ aa: 1 }"],
      ["const o2 = { aa, bb, gg, k: 3 };\n[o2.aa, o2.bb, o2.gg(), o2.k]", "[ 1, 2, 'g', 3 ]"],
      ["(() => ({ aa }))()", "{ aa: 1 }"],
      ["typeof { nodePath }.nodePath.join", "function"],
      ["({ ...{ aa }, [aa]: aa })", "{ '1': 1, aa: 1 }"],
      ["function shadow(aa: number) { return { aa }; }\nshadow(5)", "{ aa: 5 }"],
      ["({ bb } = { bb: 20 });\nbb", "20"],
      ["({ bb = 30 } = {} as { bb?: number });\nbb", "30"],
      ["({ x: bb } = { x: 40 });\nbb", "40"],
      ["[bb] = [50];\nbb", "50"],
      ["const { zz = aa } = {} as { zz?: number };\nzz", "1"],
      ["function dflt({ q = aa } = {}) { return q; }\ndflt()", "1"],
      [
        "class Fields { aa = aa; static s = aa + 1; bb = { aa }; }\n[new Fields().aa, Fields.s, new Fields().bb]",
        "[ 1, 2, { aa: 1 } ]",
      ],
      ["let n = 0;\naa: for (;;) { n = aa; break aa; }\nn", "1"],
      ["const m = { aa() { return aa + 1; }, get bb() { return aa + 2; } };\n[m.aa(), m.bb]", "[ 2, 3 ]"],
      ["namespace Ns { export const v = { aa }; }\nNs.v", "{ aa: 1 }"],
      ["enum En { A = aa + 1 }\nEn.A", "2"],
      // NB: tslab compiles this to `exports.aa = void 0;`, a line the kernel removes (partial_cell.ts).
      ["export { aa };\naa", "1"],
    ];
    const bad: string[] = [];
    for (const [code, want] of cases) {
      const r = await exec(k, code);
      if (r.status !== "ok" || r.result !== want)
        bad.push(`${code}\n  -> ${r.status} ${r.result ?? ""} ${r.ename ?? ""} ${r.evalue ?? ""}`);
    }
    expect(bad.join("\n")).toBe("");
  }, 240_000);

  it("a cell with shorthand properties that does not compile is reported on the text as written", async () => {
    const wrong = await exec(k, "const w = { aa, bb }; const bad: string = aa;");
    expect(wrong.status).toBe("error");
    expect(wrong.errorOutput?.ename).toBe("CompileError");
    // NB: column 29 of the line as typed (the cell compiled had `aa: aa, bb: bb` there).
    expect(wrong.errorOutput?.evalue).toContain("1:29 - Type 'number' is not assignable to type 'string'");
    const missing = await exec(k, "({ nope })");
    expect(missing.errorOutput?.evalue).toContain("No value exists in scope for the shorthand property 'nope'");
  }, 120_000);
});
