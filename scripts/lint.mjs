#!/usr/bin/env node
// `npm run lint`: prettier, the type check, the layer check and ESLint's promise rules. They are
// independent and each runs on one core, so they run side by side (as many at once as the machine
// has cores, the longest first); each one's output is printed when it ends, and the exit status is
// 1 when any failed.
//
// Caches, all under dist/.cache/ (built output, never packed; removing dist/ starts cold, and a
// clean clone has none): prettier's --cache keys on each file's content and prettier's options, and
// tsc's incremental build info records every input file's hash and the compiler options, so a warm
// run re-checks exactly what changed. ESLint's own cache is not used: its promise rules read types
// from other files, which its per-file cache would not notice.
import { spawn } from "node:child_process";
import os from "node:os";
import path from "node:path";

const root = path.resolve(import.meta.dirname, "..");
const node = process.execPath;
const bin = (p) => path.join(root, "node_modules", p);

/** [name, argv], longest first. */
const STEPS = [
  ["eslint", [node, bin("eslint/bin/eslint.js"), "sdk", "kernel-ext", "scripts", "test", "bench"]],
  [
    "typecheck",
    [
      node,
      bin("typescript/bin/tsc"),
      ...["-p", "tsconfig.check.json", "--incremental", "--tsBuildInfoFile", "dist/.cache/typecheck.tsbuildinfo"],
    ],
  ],
  [
    "prettier",
    [
      node,
      bin("prettier/bin/prettier.cjs"),
      ...["--check", "--cache", "--cache-strategy", "content", "--cache-location", "dist/.cache/prettier"],
      ...["sdk", "test", "bench", "scripts", "kernel-ext"],
    ],
  ],
  ["layers", [node, path.join(root, "scripts/check-layers.mjs")]],
];

function run([name, [cmd, ...args]]) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const child = spawn(cmd, args, { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    child.on("error", (e) => (out += `${e.message}\n`));
    child.on("close", (code, signal) => {
      const ok = code === 0;
      const secs = ((Date.now() - t0) / 1000).toFixed(1);
      process.stdout.write(`lint: ${name} ${ok ? "passed" : `FAILED (${signal ?? `exit ${code}`})`} in ${secs} s\n`);
      if (!ok) process.stdout.write(out);
      resolve(ok);
    });
  });
}

const width = Math.max(1, Math.min(STEPS.length, os.availableParallelism()));
const queue = [...STEPS];
const results = [];
await Promise.all(
  Array.from({ length: width }, async () => {
    for (let step = queue.shift(); step; step = queue.shift()) results.push(await run(step));
  }),
);
process.exit(results.every(Boolean) ? 0 : 1);
