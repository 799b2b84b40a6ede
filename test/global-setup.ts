/**
 * Builds dist/ once before the suites: multi-process tests start real
 * workers with `node bin/tprpc.mjs worker`, which runs the compiled SDK
 * (Node 20 cannot run TypeScript), so dist/ must match the sources.
 */
import { execFileSync } from "node:child_process";
import path from "node:path";

export default function setup(): void {
  const root = path.resolve(import.meta.dirname, "..");
  execFileSync(process.execPath, [path.join(root, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.json"], {
    cwd: root,
    stdio: "inherit",
  });
}
