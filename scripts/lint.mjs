#!/usr/bin/env node
// `npm run lint`: prettier, the type check, the layer check and ESLint's promise rules. They are
// independent and each runs on one core, so they run side by side (as many at once as the machine
// has cores, the longest first); each one's output is printed when it ends, and the exit status is
// 1 when any failed. The type check and ESLint run in one step (scripts/lint-types.mjs), which builds the
// TypeScript program they both need once.
//
// Caches, all under dist/.cache/ (built output, never packed; removing dist/ starts cold, and a
// clean clone has none): prettier's --cache keys on each file's content and prettier's options, and
// the type check and ESLint are not incremental (ESLint's per-file cache would not notice
// that its promise rules read types from other files). Instead, every step is skipped when
// the whole tree it could read (the linted folders, docs/, the root's configs and lock files) is byte
// for byte what it was at that step's last pass (scripts/input_stamp.mjs); any change reruns it whole.
//
// --emit (scripts/test.mjs, on a cold tree): the type-check step also emits the test build (lint-types.mjs
// --emit), and this process tells its parent, over IPC, when the build is there ({ built: true }) or when
// that step ended or was skipped without it ({ typesEnded: true }), so the suites can start.
import { spawn } from "node:child_process";
import os from "node:os";
import path from "node:path";
import { forget, inputStamp, passedWith, recordPass } from "./input_stamp.mjs";

const root = path.resolve(import.meta.dirname, "..");
const node = process.execPath;
const bin = (p) => path.join(root, "node_modules", p);

/** [name, argv, print the output also when it passed], longest first. */
const STEPS = [
  // NB: the type check and ESLint's promise rules, on one TypeScript program (scripts/lint-types.mjs)
  ["types", [node, path.join(root, "scripts/lint-types.mjs")], true],
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

/** What any step reads: the folders it lints or checks, and every configuration that could change a verdict. */
const treeStamp = () =>
  inputStamp(root, {
    dirs: ["sdk", "kernel-ext", "scripts", "test", "bench", "docs"],
    files: [
      ...["package.json", "package-lock.json", "node_modules/.package-lock.json"],
      ...["tsconfig.json", "tsconfig.check.json", "kernel-ext/tsconfig.json", "vitest.config.ts"],
      ...["eslint.config.js", ".prettierrc.json", ".prettierignore"],
    ],
    extra: [process.version],
  });
const before = treeStamp();
const emit = process.argv.includes("--emit");
/** Whether step `name` emits the test build and tells this process's parent (see the top). */
const relays = (name) => emit && name === "types";

async function run(step) {
  const [name, argv] = step;
  // NB: --emit adds work, not a verdict: the same record either way
  const stamp = `${before} ${JSON.stringify(argv.slice(1))}`;
  let ok = true;
  if (passedWith(root, `lint-${name}`, stamp)) {
    process.stdout.write(`lint: ${name} passed (nothing changed since its last pass)\n`);
  } else {
    forget(root, `lint-${name}`);
    ok = await spawnStep(step);
    // NB: recorded only when nothing changed while it ran, so the record names what was checked
    if (ok && treeStamp() === before) recordPass(root, `lint-${name}`, stamp);
  }
  if (relays(name)) process.send?.({ typesEnded: true });
  return ok;
}

function spawnStep([name, [cmd, ...args], showOutput]) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const relay = relays(name);
    const child = spawn(cmd, relay ? [...args, "--emit"] : args, {
      cwd: root,
      stdio: ["ignore", "pipe", "pipe", ...(relay ? ["ipc"] : [])],
    });
    if (relay) child.on("message", (m) => process.send?.(m));
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    child.on("error", (e) => (out += `${e.message}\n`));
    child.on("close", (code, signal) => {
      const ok = code === 0;
      const secs = ((Date.now() - t0) / 1000).toFixed(1);
      if (showOutput) process.stdout.write(out);
      process.stdout.write(`lint: ${name} ${ok ? "passed" : `FAILED (${signal ?? `exit ${code}`})`} in ${secs} s\n`);
      if (!ok && !showOutput) process.stdout.write(out);
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
