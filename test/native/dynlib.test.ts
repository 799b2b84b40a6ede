/**
 * The dlopen table (native/src/dynlib.cc) against stand-in libraries compiled here: a CUDA driver
 * whose cuInit fails, one that reports two devices, an NVRTC with every symbol and an NCCL that
 * lacks most of them. Each runs in a child process with LD_LIBRARY_PATH pointing at the stand-ins,
 * so the paths that a machine without GPUs never takes (symbols missing, cuInit, versions) run too.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { NativeLibStatus } from "../../sdk/native/binding.js";
import { nativeOrSkip, runFixture } from "./helpers.js";

const { native, skip } = nativeOrSkip();
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-dynlib-"));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

/** Compiles `libs/<soname>` from C source into a fresh folder; returns the folder. */
function standIns(name: string, libs: Record<string, string>): string {
  const dir = path.join(tmp, name);
  fs.mkdirSync(dir);
  for (const [soname, source] of Object.entries(libs)) {
    const src = path.join(dir, `${soname}.c`);
    fs.writeFileSync(src, source);
    const r = spawnSync("cc", ["-shared", "-fPIC", "-o", path.join(dir, soname), src], { encoding: "utf8" });
    if (r.status !== 0) throw new Error(`cc failed for ${soname}: ${r.stderr}`);
  }
  return dir;
}

/** C stubs for `symbols` (each returns 0), except those given a body in `special`. */
function stubs(symbols: string[], special: Record<string, string>): string {
  const lines = Object.values(special);
  for (const s of symbols) if (!(s in special)) lines.push(`int ${s}(void) { return 0; }`);
  return lines.join("\n") + "\n";
}

function libsWith(dir: string): Record<string, NativeLibStatus> {
  return runFixture<Record<string, NativeLibStatus>>("caps.mjs", [native!.path], {
    env: { LD_LIBRARY_PATH: dir },
  }).result;
}

describe.skipIf(skip !== null)("native dynlib", () => {
  const table = skip === null ? native!.libraryTable() : null;

  it("has a table row with sonames and symbols for every library", () => {
    expect(Object.keys(table!).sort()).toEqual(["cublas", "cuda", "nccl", "nvrtc", "ucx"]);
    expect(table!.cuda.sonames[0]).toBe("libcuda.so.1");
    expect(table!.cuda.symbols).toEqual(
      expect.arrayContaining(["cuInit", "cuDeviceGetCount", "cuMemAlloc_v2", "cuMemcpyDtoH_v2", "cuIpcGetMemHandle"]),
    );
    expect(table!.cuda.symbols).toContain("cuIpcOpenMemHandle_v2");
    expect(table!.nccl.symbols).toEqual(
      expect.arrayContaining(["ncclGetUniqueId", "ncclCommInitRank", "ncclSend", "ncclRecv"]),
    );
    expect(table!.ucx.symbols).toEqual(
      expect.arrayContaining(["ucp_init_version", "ucp_worker_create", "ucp_ep_create", "ucp_tag_send_nbx"]),
    );
  });

  it("a CUDA driver whose cuInit fails is not viable, and the reason names the error", () => {
    const dir = standIns("nodevice", {
      "libcuda.so.1": stubs(table!.cuda.symbols, {
        cuInit: "int cuInit(unsigned f) { return 100; }",
        cuGetErrorName: 'int cuGetErrorName(int e, const char** s) { *s = "CUDA_ERROR_NO_DEVICE"; return 0; }',
        cuDriverGetVersion: "int cuDriverGetVersion(int* v) { *v = 12040; return 0; }",
      }),
    });
    const cuda = libsWith(dir).cuda!;
    expect(cuda.viable).toBe(false);
    expect(cuda.path).toBe(path.join(dir, "libcuda.so.1"));
    expect(cuda.devices).toBe(0);
    expect(cuda.reason).toMatch(/cuInit failed: CUDA_ERROR_NO_DEVICE \(100\)/);
  });

  it("a complete CUDA driver with devices, and a complete NVRTC, are viable with their versions", () => {
    const dir = standIns("gpu", {
      "libcuda.so.1": stubs(table!.cuda.symbols, {
        cuDeviceGetCount: "int cuDeviceGetCount(int* n) { *n = 2; return 0; }",
        cuDriverGetVersion: "int cuDriverGetVersion(int* v) { *v = 12040; return 0; }",
      }),
      "libnvrtc.so.12": stubs(table!.nvrtc.symbols, {
        nvrtcVersion: "int nvrtcVersion(int* a, int* b) { *a = 12; *b = 4; return 0; }",
      }),
    });
    const libs = libsWith(dir);
    expect(libs.cuda).toEqual({ viable: true, path: path.join(dir, "libcuda.so.1"), version: "12.4", devices: 2 });
    expect(libs.nvrtc).toEqual({ viable: true, path: path.join(dir, "libnvrtc.so.12"), version: "12.4" });
  });

  it("a library that lacks required symbols is not viable and lists them", () => {
    const dir = standIns("oldnccl", {
      "libnccl.so.2":
        "int ncclGetVersion(int* v) { *v = 21805; return 0; }\nint ncclGetUniqueId(void* id) { return 0; }\n",
    });
    const nccl = libsWith(dir).nccl!;
    const missing = table!.nccl.symbols.filter((s) => s !== "ncclGetVersion" && s !== "ncclGetUniqueId");
    expect(nccl.viable).toBe(false);
    expect(nccl.missing).toEqual(missing);
    expect(nccl.reason).toContain(`lacks ${missing.length} required symbol(s): ${missing.join(", ")}`);
    expect(nccl.reason).toMatch(/install a newer nccl/);
  });
});
