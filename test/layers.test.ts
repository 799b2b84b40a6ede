/**
 * The layer check (scripts/check-layers.mjs) passes on the real tree and catches imports that go
 * against the layer table in docs/architecture.md in small fixture trees written to a temporary folder.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const script = path.join(repoRoot, "scripts", "check-layers.mjs");
const tmpRoots: string[] = [];

interface Violation {
  file: string;
  line: number;
  message: string;
}

function runCheck(root: string): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [script, root], { encoding: "utf8" });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

// NB: the checks on violations call the script's checkLayers here (the TypeScript compiler loads
// once); the tests on exit status and messages run it as `npm run layers` does, in a process
const { checkLayers } = (await import(script)) as { checkLayers(root: string): { violations: Violation[] } };

function violationsOf(root: string): Violation[] {
  return checkLayers(root).violations;
}

/** Writes { "sdk/x.ts": "source" } under a fresh temporary root and returns the root. */
function tree(files: Record<string, string>): string {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-layers-"));
  tmpRoots.push(root);
  for (const [rel, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
    fs.writeFileSync(path.join(root, rel), text);
  }
  return root;
}

afterAll(() => {
  for (const r of tmpRoots) fs.rmSync(r, { recursive: true, force: true });
});

const clean = {
  "sdk/errors/index.ts": "export class TprpcError extends Error {}\n",
  "sdk/util/index.ts": 'import { TprpcError } from "../errors/index.js";\nexport const E = TprpcError;\n',
  "sdk/tensor/tensor.ts": 'import { E } from "../util/index.js";\nexport class Tensor { e = E; }\n',
  "sdk/autograd/engine.ts": 'import type { Tensor } from "../tensor/tensor.js";\nexport type T = Tensor;\n',
  "sdk/native/binding.ts": 'import load from "node-gyp-build";\nexport const binding = load(".");\n',
  "sdk/transport/tcp.ts": 'import { binding } from "../native/binding.js";\nexport const b = binding;\n',
  "sdk/rpc/agent.ts":
    'import { Tensor } from "../tensor/tensor.js";\nimport { b } from "../transport/tcp.js";\nexport const a = [Tensor, b];\n',
  "sdk/index.ts": 'export * from "./rpc/agent.js";\nexport * from "./tensor/tensor.js";\n',
  "kernel-ext/index.ts":
    'import * as tprpc from "tprpc";\nimport "tslab";\nimport fs from "node:fs";\nexport { tprpc, fs };\n',
};

describe("layer check", () => {
  it("passes on the real tree", () => {
    const r = runCheck(repoRoot);
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
  });

  it("passes on a clean fixture tree", () => {
    const r = runCheck(tree(clean));
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
  });

  it("fails on a forbidden import and a second binding loader, naming the files", () => {
    const root = tree({
      ...clean,
      "sdk/tensor/x.ts":
        '// import "../rpc/agent.js" in a comment does not count\nimport { a } from "../rpc/agent.js";\nexport const x = a;\n',
      "sdk/transport/loader.ts": 'const load = require("node-gyp-build");\nexport const again = load(".");\n',
    });
    const r = runCheck(root);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain("sdk/tensor/x.ts:2: tensor -> rpc goes against the layer table in docs/architecture.md");
    expect(r.stderr).toContain("only one file may load the .node binding");
    expect(r.stderr).toContain("sdk/transport/loader.ts:1");
    expect(r.stderr).toContain("sdk/native/binding.ts:1");
  });

  it("catches dynamic imports, export-from, type imports and the package entry inside sdk/", () => {
    const v = violationsOf(
      tree({
        ...clean,
        "sdk/autograd/lazy.ts": 'export async function f() { return import("../pipe/pipe.js"); }\n',
        "sdk/nn/reexp.ts": 'export { SGD } from "../optim/sgd.js";\n',
        "sdk/wire/codec.ts": 'export type A = import("../autograd/engine.js").T;\n',
        "sdk/errors/bad.ts": 'import { E } from "../util/index.js";\nexport const e = E;\n',
        "sdk/channel/c.ts": 'import * as t from "tprpc";\nexport { t };\n',
      }),
    );
    const lines = v.map((x) => `${x.file}:${x.line}: ${x.message}`);
    expect(lines).toEqual(
      expect.arrayContaining([
        expect.stringContaining("sdk/autograd/lazy.ts:1: autograd -> pipe"),
        expect.stringContaining("sdk/nn/reexp.ts:1: nn -> optim"),
        expect.stringContaining("sdk/wire/codec.ts:1: wire -> autograd"),
        expect.stringContaining("sdk/errors/bad.ts:1: errors -> util"),
        expect.stringContaining("sdk/channel/c.ts:1: channel -> index"),
      ]),
    );
    expect(v).toHaveLength(5);
  });

  it("fails on unknown layers and on kernel-ext reaching past sdk/index.ts", () => {
    const v = violationsOf(
      tree({
        ...clean,
        "sdk/misc/helpers.ts": "export const h = 1;\n",
        "kernel-ext/deep.ts": 'import { Tensor } from "../sdk/tensor/tensor.js";\nexport { Tensor };\n',
        "kernel-ext/ok.ts": 'import * as t from "../sdk/index.js";\nimport { x } from "./util.js";\nexport { t, x };\n',
      }),
    );
    expect(v.map((x) => x.file).sort()).toEqual(["kernel-ext/deep.ts", "sdk/misc/helpers.ts"]);
    expect(v.find((x) => x.file === "sdk/misc/helpers.ts")?.message).toContain("not a known layer");
  });
});
