/**
 * Packaging (scripts/test-pack.mjs --from-build): the npm tarball holds the linux-x64 prebuild,
 * and a scratch project that installs it imports tprpc with the addon and compiles nothing.
 * `npm run test:pack` runs the same check with a full prebuildify compile.
 */
import { spawnSync } from "node:child_process";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { nativeOrSkip, repoRoot } from "./helpers.js";

const { skip } = nativeOrSkip();

interface PackSummary {
  ok: boolean;
  error?: string;
  ldd: string[];
  tarball: { files: number; bytes: number };
  installed: { path: string; blas: string; aligned: boolean };
  fallback: { path: null; warnings: number; backend: string | null };
  seconds: number;
}

describe.skipIf(skip !== null)("npm package", () => {
  it("installs from the tarball without compiling and loads the prebuild", { timeout: 180_000 }, () => {
    const r = spawnSync(process.execPath, [path.join(repoRoot, "scripts", "test-pack.mjs"), "--from-build"], {
      cwd: repoRoot,
      encoding: "utf8",
      timeout: 170_000,
    });
    const s = JSON.parse(r.stdout.trim().split("\n").pop()!) as PackSummary;
    expect(s.error ?? null, r.stderr).toBeNull();
    expect(s.ok).toBe(true);
    expect(s.installed.path).toMatch(/node_modules\/tprpc\/native\/prebuilds\/linux-x64\/tprpc\.glibc\.node$/);
    // NB: OpenBLAS and the C++ runtime are linked statically: the prebuild needs only glibc.
    expect([...s.ldd].sort()).toEqual(["/lib64/ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "linux-vdso.so.1"]);
    expect(s.fallback).toMatchObject({ path: null, warnings: 1 });
  });
});
