/**
 * Builds dist/ once before the suites: multi-process tests start real
 * workers with `node bin/tprpc.mjs worker`, which runs the compiled SDK
 * (Node 20 cannot run TypeScript), so dist/ must match the sources. Then the
 * kernel package (kernel-ext/dist, against the SDK's .d.ts), which the kernel
 * and CLI suites run, as `npm run build` does.
 */
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { inputStamp, passedWith, recordPass } from "../scripts/input_stamp.mjs";

export default function setup(): void {
  const root = path.resolve(import.meta.dirname, "..");
  // NB: incremental: tsc's build info records every input's hash and the options, so a run with no
  // change re-emits nothing, and a change re-emits what it affects. Each project's build info lives in
  // its own output folder, so removing that folder (or a clean clone) builds everything.
  const tsc = path.join(root, "node_modules/typescript/bin/tsc");
  const projects = [
    { config: "tsconfig.json", out: "dist", entry: "dist/sdk/index.js" },
    { config: "kernel-ext/tsconfig.json", out: "kernel-ext/dist", entry: "kernel-ext/dist/kernel.js" },
  ];
  // NB: even a build with nothing to emit costs tsc seconds (it reads and hashes every input and
  // rebuilds its program), before any suite can start: skipped when the inputs of both projects are
  // those of the last successful build (scripts/input_stamp.mjs) and its outputs are still there
  const stamp = inputStamp(root, {
    dirs: ["sdk", "scripts", "bench", "kernel-ext"],
    keep: (f) => /\.[cm]?ts$/.test(f),
    files: ["tsconfig.json", "kernel-ext/tsconfig.json", "package-lock.json", "node_modules/.package-lock.json"],
    extra: projects.map((p) => p.config),
  });
  // NB: with the entries' modification times, so that a build by other means since (`npm run build`,
  // which rewrites every output, from sources edited and then restored) is not taken for this one
  const outputs = () =>
    projects.map((p) => fs.statSync(path.join(root, p.entry), { throwIfNoEntry: false })?.mtimeMs ?? "none").join();
  if (passedWith(root, "build", `${stamp} ${outputs()}`)) return;
  for (const p of projects) {
    const info = `${p.out}/.cache/build.tsbuildinfo`;
    // NB: the build info does not notice outputs removed behind its back: with the entry gone, start cold
    if (!fs.existsSync(path.join(root, p.entry))) fs.rmSync(path.join(root, info), { force: true });
    const incremental = ["--incremental", "--tsBuildInfoFile", info];
    execFileSync(process.execPath, [tsc, "-p", p.config, ...incremental], { cwd: root, stdio: "inherit" });
  }
  recordPass(root, "build", `${stamp} ${outputs()}`);
}
