/**
 * The GPU loaders (native/src/gpu over dynlib's dlopen table) and their typed
 * wrapper sdk/native/gpu.ts:
 * 1. on this machine: CUDA driver, NVRTC, cuBLAS and NCCL are not viable, each
 *    with a reason that says what to install, and the queries that need them
 *    throw NativeError "ENOTVIABLE" carrying it;
 * 2. against stand-in libraries compiled here (a driver with two devices, an
 *    NCCL whose unique id is a known pattern, one whose call fails), in child
 *    processes with LD_LIBRARY_PATH set, so the viable paths run too.
 * NB: stand-ins check the loader's glue (symbols, ABI of the calls, errors),
 * not a GPU; real devices are exercised on a GPU machine (issue 9, part B).
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { NativeError } from "../../sdk/index.js";
import { cudaDevices, gpuLibrary, gpuStatus, nativeGpu } from "../../sdk/native/gpu.js";
import { nativeOrSkip, runFixture } from "./helpers.js";

const { native, skip } = nativeOrSkip();
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-gpu-"));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

function standIns(name: string, libs: Record<string, string>): string {
  const dir = path.join(tmp, name);
  fs.mkdirSync(dir);
  for (const [soname, source] of Object.entries(libs)) {
    const src = path.join(dir, `${soname}.c`);
    fs.writeFileSync(src, "#include <stdio.h>\n#include <string.h>\n" + source);
    const r = spawnSync("cc", ["-shared", "-fPIC", "-o", path.join(dir, soname), src], { encoding: "utf8" });
    if (r.status !== 0) throw new Error(`cc failed for ${soname}: ${r.stderr}`);
  }
  return dir;
}

/** C stubs returning 0 for `symbols`, except those given a body in `special`. */
function stubs(symbols: string[], special: Record<string, string>): string {
  const lines = Object.values(special);
  for (const s of symbols) if (!(s in special)) lines.push(`int ${s}(void) { return 0; }`);
  return lines.join("\n") + "\n";
}

interface Attempt<T> {
  ok?: T;
  error?: { name: string; code: string; message: string };
}
interface GpuReport {
  status: ReturnType<typeof gpuStatus>;
  devices: Attempt<ReturnType<typeof cudaDevices>>;
  nccl: Attempt<number[]>;
}

const report = (dir: string) =>
  runFixture<GpuReport>("gpu.mjs", [native!.path], { env: { LD_LIBRARY_PATH: dir } }).result;

describe.skipIf(skip !== null)("GPU loaders", () => {
  // NB: on a machine with GPU libraries these two do not apply: skipped by capability.
  const anyViable = skip === null && Object.values(gpuStatus()).some((s) => s.viable);

  it.skipIf(anyViable)("reports every GPU library not viable here, with what to do", () => {
    const s = gpuStatus();
    expect(Object.keys(s).sort()).toEqual(["cublas", "cuda", "nccl", "nvrtc"]);
    for (const name of ["cuda", "nvrtc", "cublas", "nccl"] as const) {
      expect(s[name].viable).toBe(false);
      expect(gpuLibrary(name).isViable()).toBe(false);
      expect(gpuLibrary(name).reason()).toMatch(/install it or add its directory to LD_LIBRARY_PATH/);
    }
    expect(cudaDevices()).toEqual([]);
  });

  it.skipIf(anyViable)("throws NativeError ENOTVIABLE with the reason from queries that need a library", () => {
    const g = nativeGpu()!;
    expect(() => g.devices()).toThrow(NativeError);
    expect(() => g.devices()).toThrow(/^cuda is not viable here: cuda is not installed/);
    try {
      g.ncclUniqueId();
      expect.unreachable();
    } catch (e) {
      expect((e as NativeError).code).toBe("ENOTVIABLE");
      expect((e as Error).message).toMatch(/nccl is not viable here: .*libnccl\.so\.2/);
    }
  });

  it("lists the stand-in driver's devices and returns NCCL's unique id", () => {
    const table = native!.libraryTable();
    const dir = standIns("gpu", {
      "libcuda.so.1": stubs(table.cuda.symbols, {
        cuDeviceGetCount: "int cuDeviceGetCount(int* n) { *n = 2; return 0; }",
        cuDeviceGet: "int cuDeviceGet(int* d, int i) { *d = i; return 0; }",
        cuDeviceGetName:
          'int cuDeviceGetName(char* s, int n, int d) { snprintf(s, n, "Stand-in GPU %d", d); return 0; }',
        cuDeviceGetPCIBusId:
          'int cuDeviceGetPCIBusId(char* s, int n, int d) { snprintf(s, n, "0000:%02x:00.0", 0x3b + d); return 0; }',
        cuDeviceGetAttribute:
          "int cuDeviceGetAttribute(int* v, int a, int d) { *v = a == 75 ? 9 : a == 76 ? d : a == 16 ? 132 : a == 41 ? 1 : -1; return 0; }",
      }),
      "libnccl.so.2": stubs(table.nccl.symbols, {
        ncclGetVersion: "int ncclGetVersion(int* v) { *v = 22105; return 0; }",
        ncclGetUniqueId:
          "int ncclGetUniqueId(unsigned char* id) { for (int i = 0; i < 128; i++) id[i] = (unsigned char)(i * 7); return 0; }",
      }),
    });
    const r = report(dir);
    expect(r.status.cuda).toMatchObject({ viable: true, devices: 2 });
    expect(r.status.nccl).toMatchObject({ viable: true, version: "2.21.5" });
    expect(r.status.nvrtc.viable).toBe(false);
    expect(r.devices.ok).toEqual(
      [0, 1].map((i) => ({
        index: i,
        name: `Stand-in GPU ${i}`,
        pciBusId: `0000:${(0x3b + i).toString(16)}:00.0`,
        major: 9,
        minor: i,
        multiProcessors: 132,
        unifiedAddressing: true,
      })),
    );
    expect(r.nccl.ok).toEqual(Array.from({ length: 128 }, (_, i) => (i * 7) & 0xff));
  });

  it("turns a failing driver or NCCL call into a NativeError naming the call and the error", () => {
    const table = native!.libraryTable();
    const dir = standIns("failing", {
      "libcuda.so.1": stubs(table.cuda.symbols, {
        cuDeviceGetCount: "int cuDeviceGetCount(int* n) { *n = 1; return 0; }",
        cuDeviceGetName: "int cuDeviceGetName(char* s, int n, int d) { return 101; }",
        cuGetErrorName:
          'int cuGetErrorName(int e, const char** s) { *s = e == 101 ? "CUDA_ERROR_INVALID_DEVICE" : "?"; return 0; }',
      }),
      "libnccl.so.2": stubs(table.nccl.symbols, {
        ncclGetUniqueId: "int ncclGetUniqueId(void* id) { return 2; }",
        ncclGetErrorString: 'const char* ncclGetErrorString(int e) { return "unhandled system error"; }',
      }),
    });
    const r = report(dir);
    expect(r.devices.error).toEqual({
      name: "NativeError",
      code: "ECUDA",
      message: "querying CUDA device 0 failed: CUDA_ERROR_INVALID_DEVICE (101)",
    });
    expect(r.nccl.error).toEqual({
      name: "NativeError",
      code: "ENCCL",
      message: "ncclGetUniqueId failed: unhandled system error",
    });
  });
});
