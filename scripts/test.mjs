#!/usr/bin/env node
// `npm test`: the lint steps (scripts/lint.mjs) and every vitest suite, side by side rather than one after
// the other: the suites spend much of their time waiting on other processes and timers, which leaves the
// lint's CPU time free to fill. Arguments go to vitest (`npm test -- test/tensor`). The lint's report is
// printed after vitest's, and the exit status is 1 when either failed (vitest's own status when only it
// failed).
//
// On a cold tree (a clean clone, or dist/ removed: scripts/test_build.mjs isCold), the suites need dist/
// built before they start, and the type check builds the same TypeScript program anyway: the lint's
// type-check step emits the build (lint.mjs --emit), and vitest starts once it has (or once that step
// ended without it: test/global-setup.ts then builds with tsc as usual). On a warm tree test/global-setup.ts
// builds incrementally, which re-emits only what changed, and vitest starts at once.
import { spawn } from "node:child_process";
import path from "node:path";
import { isBuilt, isCold } from "./test_build.mjs";

const root = path.resolve(import.meta.dirname, "..");
const node = process.execPath;
const emit = !isBuilt(root) && isCold(root);

let buildReady;
const built = new Promise((resolve) => (buildReady = resolve));
if (!emit) buildReady();

const lint = new Promise((resolve) => {
  const child = spawn(node, [path.join(root, "scripts/lint.mjs"), ...(emit ? ["--emit"] : [])], {
    cwd: root,
    stdio: ["ignore", "pipe", "pipe", ...(emit ? ["ipc"] : [])],
  });
  child.on("message", () => buildReady());
  child.on("exit", () => buildReady());
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (out += d));
  child.on("error", (e) => {
    buildReady();
    resolve({ ok: false, out: `${out}${e.message}\n` });
  });
  child.on("close", (code) => resolve({ ok: code === 0, out }));
});

const vitest = built.then(
  () =>
    new Promise((resolve) => {
      const child = spawn(node, [path.join(root, "node_modules/vitest/vitest.mjs"), "run", ...process.argv.slice(2)], {
        cwd: root,
        stdio: "inherit",
      });
      child.on("error", (e) => {
        process.stderr.write(`vitest did not start: ${e.message}\n`);
        resolve(1);
      });
      child.on("close", (code, signal) => resolve(code ?? (signal ? 1 : 0)));
    }),
);

const [lintResult, vitestCode] = await Promise.all([lint, vitest]);
process.stdout.write(`\n${lintResult.out}`);
if (!lintResult.ok) process.stdout.write("npm test: the lint failed (above)\n");
process.exit(vitestCode !== 0 ? vitestCode : lintResult.ok ? 0 : 1);
