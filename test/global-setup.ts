/**
 * Builds dist/ once before the suites: multi-process tests start real
 * workers with `node bin/tprpc.mjs worker`, which runs the compiled SDK
 * (Node 20 cannot run TypeScript), so dist/ must match the sources. Then the
 * kernel package (kernel-ext/dist, against the SDK's .d.ts), which the kernel
 * and CLI suites run, as `npm run build` does (scripts/test_build.mjs).
 */
import path from "node:path";
import { PROJECTS, buildInputs, isBuilt, recordBuilt, tscBuild } from "../scripts/test_build.mjs";

export default function setup(): void {
  const root = path.resolve(import.meta.dirname, "..");
  // NB: even a build with nothing to emit costs tsc seconds (it reads and hashes every input and
  // rebuilds its program), before any suite can start: skipped when the inputs of both projects are
  // those of the last successful build and its outputs are still there. Under `npm test` on a cold tree,
  // the type-check step has built both already (scripts/test.mjs), and this finds nothing to do.
  // NB: hashed once, before the build, so that a source saved while tsc runs is not recorded as built
  const inputs = buildInputs(root);
  if (isBuilt(root, inputs)) return;
  for (const p of PROJECTS) tscBuild(root, p);
  recordBuilt(root, inputs);
}
