/**
 * CUDA tensors through the real chain — sdk/index.ts wiring, the tensor
 * layer's CUDA DeviceBackend, the addon's gpu() memory calls and the dlopen
 * table — against a stand-in libcuda compiled here, whose "device" memory is
 * host malloc memory and which refuses a pointer used under another device's
 * context (CUDA_ERROR_INVALID_CONTEXT), so a missing context switch shows,
 * and which counts live allocations (cuMemGetInfo), so leaks show.
 * The compiled SDK runs in a child process with LD_LIBRARY_PATH set.
 * NB: this checks tprpc's glue, not a GPU; issue 9 part B runs it on one.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { nativeOrSkip, runFixture } from "./helpers.js";

const { native, skip } = nativeOrSkip();
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-gpu-tensors-"));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

/** Stand-in driver: 2 devices, contexts 1 and 2, allocations remembered with their context. */
const DRIVER = `
#include <stdlib.h>
#include <string.h>
typedef unsigned long long P;
static void* cur = 0;
static struct { P p; void* ctx; } allocs[4096];
static int nallocs = 0;
static long live = 0;
static void* ctx_of(P p) {
  for (int i = 0; i < nallocs; i++)
    if (p >= allocs[i].p && p < allocs[i].p + (1u << 20)) return allocs[i].ctx;
  return (void*)-1;
}
int cuDeviceGetCount(int* n) { *n = 2; return 0; }
int cuDeviceGet(int* d, int i) { *d = i; return 0; }
int cuDevicePrimaryCtxRetain(void** c, int d) { *c = (void*)(long)(d + 1); return 0; }
int cuCtxSetCurrent(void* c) { cur = c; return 0; }
int cuGetErrorName(int e, const char** s) { *s = e == 201 ? "CUDA_ERROR_INVALID_CONTEXT" : "CUDA_ERROR_OTHER"; return 0; }
int cuMemAlloc_v2(P* p, size_t n) {
  if (cur == 0 || nallocs == 4096) return 201;
  *p = (P)malloc(1u << 20); allocs[nallocs].p = *p; allocs[nallocs].ctx = cur; nallocs++; live++; return 0;
}
int cuMemFree_v2(P p) { if (ctx_of(p) != cur) return 201; live--; return 0; }  /* NB: never reused */
int cuMemGetInfo_v2(size_t* f, size_t* t) { *t = (size_t)1 << 30; *f = *t - (size_t)live * (1u << 20); return 0; }
int cuMemcpyHtoD_v2(P d, const void* s, size_t n) { if (ctx_of(d) != cur) return 201; memcpy((void*)d, s, n); return 0; }
int cuMemcpyDtoH_v2(void* d, P s, size_t n) { if (ctx_of(s) != cur) return 201; memcpy(d, (void*)s, n); return 0; }
int cuMemcpyDtoD_v2(P d, P s, size_t n) {
  if (ctx_of(d) != cur || ctx_of(s) != cur) return 201; memcpy((void*)d, (void*)s, n); return 0;
}
/* NB: the stand-in runs no kernels: loading the addon's fatbin fails, so ops on its tensors fail */
int cuModuleLoadData(void** m, const void* image) { return 200; }
int cuMemcpyPeerAsync(P d, void* dc, P s, void* sc, size_t n, void* st) {
  if (ctx_of(d) != dc || ctx_of(s) != sc) return 201; memcpy((void*)d, (void*)s, n); return 0;
}
`;

function standInDriver(symbols: string[]): string {
  const defined = new Set([...DRIVER.matchAll(/^int (\w+)\(/gm)].map((m) => m[1]!));
  const rest = symbols.filter((s) => !defined.has(s)).map((s) => `int ${s}(void) { return 0; }`);
  const dir = path.join(tmp, "driver");
  fs.mkdirSync(dir);
  const src = path.join(dir, "cuda.c");
  fs.writeFileSync(src, DRIVER + rest.join("\n") + "\n");
  const r = spawnSync("cc", ["-shared", "-fPIC", "-o", path.join(dir, "libcuda.so.1"), src], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`cc failed: ${r.stderr}`);
  return dir;
}

describe.skipIf(skip !== null)("CUDA tensors over a stand-in driver", () => {
  it("move, print, differentiate and fail as the DeviceBackend contract says", () => {
    const dir = standInDriver(native!.libraryTable().cuda.symbols);
    const r = runFixture<Record<string, unknown>>("gpu-tensors.mjs", [], {
      env: { LD_LIBRARY_PATH: dir },
      flags: ["--expose-gc"],
    }).result;
    const m = [
      [1, 2, 3],
      [4, 5, 6],
    ];
    expect(r).toEqual({
      memory: { allocatedMiB: 50, freedAll: true }, // one stand-in block (1 MiB) per storage
      available: true,
      count: 2,
      device: "cuda:1",
      roundTrip: m,
      transposed: [
        [1, 4],
        [2, 5],
        [3, 6],
      ],
      peer: m,
      sameDevice: m,
      int64: [0, 1, 2, 3, 4],
      zeros: [0, 0, 0, 0],
      printed: "tensor([1.5000], device='cuda:0')",
      // the CUDA kernel backend launches through the driver (which here cannot load the fatbin), or
      // says why this build has no kernels
      op: {
        error: expect.stringMatching(
          /^NativeError: CUDA kernel backend \(device\): cuModuleLoadData \(the addon's fatbin\) failed|^DeviceError: no kernels for tensors on 'cuda:0'/,
        ),
      },
      badOrdinal: {
        error: expect.stringMatching(/^DeviceError: CUDA error: invalid device ordinal: 'cuda:2' .* 2 CUDA device/),
      },
      grad: [3, 4],
    });
  });
});
