#!/usr/bin/env node
// `npm test`: the lint steps (scripts/lint.mjs) and every vitest suite, side by side rather than one after
// the other: the suites spend much of their time waiting on other processes and timers, which leaves the
// lint's CPU time free to fill. Arguments go to vitest (`npm test -- test/tensor`). The lint's report is
// printed after vitest's, and the exit status is 1 when either failed (vitest's own status when only it
// failed).
import { spawn } from "node:child_process";
import path from "node:path";

const root = path.resolve(import.meta.dirname, "..");
const node = process.execPath;

const lint = new Promise((resolve) => {
  const child = spawn(node, [path.join(root, "scripts/lint.mjs")], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (out += d));
  child.on("error", (e) => resolve({ ok: false, out: `${out}${e.message}\n` }));
  child.on("close", (code) => resolve({ ok: code === 0, out }));
});

const vitest = new Promise((resolve) => {
  const child = spawn(node, [path.join(root, "node_modules/vitest/vitest.mjs"), "run", ...process.argv.slice(2)], {
    cwd: root,
    stdio: "inherit",
  });
  child.on("error", (e) => {
    process.stderr.write(`vitest did not start: ${e.message}\n`);
    resolve(1);
  });
  child.on("close", (code, signal) => resolve(code ?? (signal ? 1 : 0)));
});

const [lintResult, vitestCode] = await Promise.all([lint, vitest]);
process.stdout.write(`\n${lintResult.out}`);
if (!lintResult.ok) process.stdout.write("npm test: the lint failed (above)\n");
process.exit(vitestCode !== 0 ? vitestCode : lintResult.ok ? 0 : 1);
