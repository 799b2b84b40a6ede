/**
 * Builds dist/ once before the suites: multi-process tests start real
 * workers with `node bin/tprpc.mjs worker`, which runs the compiled SDK
 * (Node 20 cannot run TypeScript), so dist/ must match the sources.
 */
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

export default function setup(): void {
  const root = path.resolve(import.meta.dirname, "..");
  // NB: incremental: tsc's build info records every input's hash and the options, so a run with no
  // change re-emits nothing, and a change re-emits what it affects. It lives in dist/, so removing
  // dist/ (or a clean clone) builds everything.
  const tsc = path.join(root, "node_modules/typescript/bin/tsc");
  const info = "dist/.cache/build.tsbuildinfo";
  // NB: the build info does not notice outputs removed behind its back: with the SDK's entry gone, start cold
  if (!fs.existsSync(path.join(root, "dist/sdk/index.js"))) fs.rmSync(path.join(root, info), { force: true });
  const incremental = ["--incremental", "--tsBuildInfoFile", info];
  execFileSync(process.execPath, [tsc, "-p", "tsconfig.json", ...incremental], { cwd: root, stdio: "inherit" });
}
