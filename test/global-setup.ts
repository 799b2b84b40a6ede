/**
 * Builds dist/ once before the suites: multi-process tests start real
 * workers with `node bin/tprpc.mjs worker`, which runs the compiled SDK
 * (Node 20 cannot run TypeScript), so dist/ must match the sources. Then the
 * kernel package (kernel-ext/dist, against the SDK's .d.ts), which the kernel
 * and CLI suites run, as `npm run build` does.
 */
import { execFileSync } from "node:child_process";
import path from "node:path";

export default function setup(): void {
  const root = path.resolve(import.meta.dirname, "..");
  for (const project of ["tsconfig.json", "kernel-ext/tsconfig.json"])
    execFileSync(process.execPath, [path.join(root, "node_modules/typescript/bin/tsc"), "-p", project], {
      cwd: root,
      stdio: "inherit",
    });
}
