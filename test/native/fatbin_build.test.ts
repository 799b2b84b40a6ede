/**
 * The addon builds without nvcc: native/build.mjs --fatbin with TPRPC_NVCC=0, run on a copy of
 * native/, writes an empty gen/tprpc_fatbin.inc that says why, and the one translation unit that
 * embeds it (src/cuda/driver_launcher.cc) compiles against it. (The whole build with nvcc is what
 * `npm run build:native` does wherever nvcc is found; the no-nvcc .inc is the only part that differs.)
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const root = path.resolve(import.meta.dirname, "../..");
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-fatbin-"));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));
const cxx = spawnSync("g++", ["--version"]).status === 0 ? "g++" : null;

describe.skipIf(cxx === null)("the addon without nvcc", () => {
  it("gets an empty fatbin that says why, and the launcher compiles against it", () => {
    const native = path.join(tmp, "native");
    fs.mkdirSync(native);
    fs.cpSync(path.join(root, "native/src"), path.join(native, "src"), { recursive: true });
    fs.copyFileSync(path.join(root, "native/build.mjs"), path.join(native, "build.mjs"));
    const r = spawnSync(process.execPath, [path.join(native, "build.mjs"), "--fatbin"], {
      env: { ...process.env, TPRPC_NVCC: "0" },
      encoding: "utf8",
      timeout: 60_000,
    });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).toContain("no CUDA kernels in this build: TPRPC_NVCC=0");
    const inc = fs.readFileSync(path.join(native, "gen/tprpc_fatbin.inc"), "utf8");
    expect(inc).toContain("kTprpcFatbinSize = 0;");
    expect(inc).toContain('kTprpcFatbinReason = "TPRPC_NVCC=0 turned the CUDA kernel build off"');

    const napi = createRequire(import.meta.url)("node-addon-api").include_dir as string;
    const c = spawnSync(
      cxx!,
      ["-std=c++17", "-fsyntax-only", "-I", "src", "-I", "gen", "-I", napi, "src/cuda/driver_launcher.cc"],
      { cwd: native, encoding: "utf8", timeout: 120_000 },
    );
    expect(c.status, c.stderr).toBe(0);
  }, 180_000);
});
