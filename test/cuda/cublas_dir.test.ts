/**
 * cuBLAS found by dlopen outside the loader path (native/src/dynlib.cc): in a
 * TPRPC_CUBLAS_DIR directory, and where PyTorch's wheels put it
 * (<venv>/lib/python3.X/site-packages/nvidia/cublas/lib, next to its
 * libcublasLt). A stand-in libcublas.so.12 with the table's symbols is built
 * here; a child process reports what capabilities() found.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { nativeOrSkip } from "../native/helpers.js";

const { native, skip } = nativeOrSkip();
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-cublas-"));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

/** libcublasLt.so.12 and libcublas.so.12 (which links it) in `dir`; cublasGetProperty says 12.9.1. */
function standIn(dir: string, symbols: string[]): void {
  fs.mkdirSync(dir, { recursive: true });
  const lt = path.join(dir, "lt.c");
  fs.writeFileSync(lt, "int cublasLtGetVersion(void) { return 120901; }\n");
  const cc = (args: string[]): void => {
    const r = spawnSync("cc", args, { encoding: "utf8" });
    if (r.status !== 0) throw new Error(`cc failed: ${r.stderr}`);
  };
  cc(["-shared", "-fPIC", "-Wl,-soname,libcublasLt.so.12", "-o", path.join(dir, "libcublasLt.so.12"), lt]);
  const body = symbols
    .filter((s) => s !== "cublasGetProperty")
    .map((s) => `int ${s}(void) { return cublasLtGetVersion() > 0 ? 0 : 1; }`);
  const src = path.join(dir, "cublas.c");
  fs.writeFileSync(
    src,
    "int cublasLtGetVersion(void);\n" +
      "int cublasGetProperty(int t, int* v) { *v = t == 0 ? 12 : t == 1 ? 9 : 1; return 0; }\n" +
      body.join("\n") +
      "\n",
  );
  // NB: no rpath: libcublasLt must come from the preload of its directory, as in the wheels
  cc(["-shared", "-fPIC", "-o", path.join(dir, "libcublas.so.12"), src, "-L", dir, "-l:libcublasLt.so.12"]);
}

function probe(env: Record<string, string>): { viable: boolean; path?: string; version?: string; reason?: string } {
  const addon = path.resolve("native/build/Release/tprpc.node");
  const r = spawnSync(
    process.execPath,
    ["-e", `process.stdout.write(JSON.stringify(require(${JSON.stringify(addon)}).capabilities().libs.cublas))`],
    { encoding: "utf8", env: { PATH: process.env.PATH ?? "", HOME: tmp, ...env }, timeout: 30_000 },
  );
  if (r.status !== 0) throw new Error(`probe failed: ${r.stderr}`);
  return JSON.parse(r.stdout) as { viable: boolean; path?: string; version?: string };
}

describe.skipIf(skip !== null || !fs.existsSync("native/build/Release/tprpc.node"))(
  "cuBLAS outside the loader path",
  () => {
    const symbols = skip === null ? native!.libraryTable().cublas.symbols : [];

    it("is found in TPRPC_CUBLAS_DIR", () => {
      const dir = path.join(tmp, "plain");
      standIn(dir, symbols);
      const s = probe({ TPRPC_CUBLAS_DIR: `/nonexistent:${dir}` });
      expect(s).toMatchObject({ viable: true, version: "12.9.1" });
      expect(s.path).toBe(path.join(dir, "libcublas.so.12"));
    });

    it("is found where PyTorch's wheels put it, under VIRTUAL_ENV", () => {
      const venv = path.join(tmp, "venv");
      const dir = path.join(venv, "lib", "python3.11", "site-packages", "nvidia", "cublas", "lib");
      standIn(dir, symbols);
      expect(probe({ VIRTUAL_ENV: venv })).toMatchObject({ viable: true, path: path.join(dir, "libcublas.so.12") });
    });

    it("says where it looked when it is nowhere", () => {
      const s = probe({});
      expect(s.viable).toBe(false);
      expect(s.reason).toMatch(/TPRPC_CUBLAS_DIR and PyTorch's site-packages\/nvidia\/cublas\/lib/);
    });
  },
);
