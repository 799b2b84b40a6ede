// The build the test suites need (dist/ and kernel-ext/dist), and the record of it: multi-process suites
// start real workers with `node bin/tprpc.mjs worker`, which runs the compiled SDK (Node 20 cannot run
// TypeScript), and the kernel suites run kernel-ext/dist against the SDK's .d.ts. Two builders use this:
// test/global-setup.ts (before any suite: tsc, incremental) and, on a cold tree, `npm test`'s type-check
// step (scripts/lint-types.mjs --emit, which emits dist/ from the program it checks anyway; scripts/test.mjs).
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { inputStamp, passedWith, recordPass } from "./input_stamp.mjs";

/** The two tsc projects, in build order: the kernel's compiles against the SDK's .d.ts in dist/. */
export const PROJECTS = [
  { config: "tsconfig.json", out: "dist", entry: "dist/sdk/index.js" },
  { config: "kernel-ext/tsconfig.json", out: "kernel-ext/dist", entry: "kernel-ext/dist/kernel.js" },
];

/** Where tsc keeps a project's incremental build info: in its output folder, so removing that starts cold. */
export const buildInfo = (p) => `${p.out}/.cache/build.tsbuildinfo`;

/**
 * The stamp of the build's inputs: the sources of both projects, their configs (tsconfig.check.json too:
 * a cold `npm test` emits from its program, scripts/lint-types.mjs) and the installed packages. Taken
 * before a build, so that a source saved while it ran is not recorded as built.
 */
export const buildInputs = (root) =>
  inputStamp(root, {
    dirs: ["sdk", "scripts", "bench", "kernel-ext"],
    keep: (f) => /\.[cm]?ts$/.test(f),
    files: [
      ...["tsconfig.json", "tsconfig.check.json", "kernel-ext/tsconfig.json"],
      ...["package-lock.json", "node_modules/.package-lock.json"],
    ],
    extra: PROJECTS.map((p) => p.config),
  });

// NB: the entries' modification times are part of the record, so that a build by other means since (`npm
// run build`, which rewrites every output, from sources edited and then restored) is not taken for this one
const outputs = (root) =>
  PROJECTS.map((p) => fs.statSync(path.join(root, p.entry), { throwIfNoEntry: false })?.mtimeMs ?? "none").join();

/** Whether both projects' outputs are those of a build from `inputs` (buildInputs: today's; nothing to do). */
export const isBuilt = (root, inputs = buildInputs(root)) => passedWith(root, "build", `${inputs} ${outputs(root)}`);

/** Records that both projects were built from `inputs` (buildInputs, taken before the build began). */
export const recordBuilt = (root, inputs) => recordPass(root, "build", `${inputs} ${outputs(root)}`);

/**
 * Whether a tsc build would start from nothing: an output or its build info is missing (a clean clone, or
 * a tree whose last build was `npm test`'s emit, which writes no build info: such a tree stays on that path
 * until tsc builds it, `npx vitest run` or `npm run build`).
 */
export const isCold = (root) =>
  PROJECTS.some((p) => !fs.existsSync(path.join(root, p.entry)) || !fs.existsSync(path.join(root, buildInfo(p))));

/**
 * Builds one project with tsc, incrementally: its build info records every input's hash and the options, so
 * a change re-emits what it affects. The build info does not notice outputs removed behind its back: with
 * the entry gone, it starts cold.
 */
export function tscBuild(root, p) {
  const info = buildInfo(p);
  if (!fs.existsSync(path.join(root, p.entry))) fs.rmSync(path.join(root, info), { force: true });
  const tsc = path.join(root, "node_modules/typescript/bin/tsc");
  execFileSync(process.execPath, [tsc, "-p", p.config, "--incremental", "--tsBuildInfoFile", info], {
    cwd: root,
    stdio: "inherit",
  });
}
