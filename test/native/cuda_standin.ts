/**
 * A stand-in libcuda.so.1 for tests, compiled here with cc: two devices whose
 * "device" memory is host malloc memory. What it lets a test see and steer:
 * - contexts: a pointer used under another device's context fails with
 *   CUDA_ERROR_INVALID_CONTEXT (201), so a missing context switch shows;
 * - memory: cuMemGetInfo reports a total of STANDIN_MEM_LIMIT bytes (read at
 *   each call, default 1 GiB) minus the live allocations; cuMemAlloc beyond it
 *   fails with CUDA_ERROR_OUT_OF_MEMORY (2);
 * - events: an event recorded on a stream completes when STANDIN_EVENTS_DONE
 *   is "1" at query time (process.env reaches getenv), or when it or its
 *   stream is synchronized; until then cuEventQuery says CUDA_ERROR_NOT_READY;
 * - a log: with STANDIN_LOG set, every allocation, free, host allocation and
 *   async copy or memset appends a line ("alloc 2097152", "free 2097152", "htod 4194304").
 * Every other symbol of dynlib's table returns 0.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

const DRIVER = `
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef unsigned long long P;
static void* cur = 0;
static struct { P p; size_t n; void* ctx; int live; } allocs[65536];
static int nallocs = 0;
static size_t live_bytes = 0;
static size_t limit(void) { const char* s = getenv("STANDIN_MEM_LIMIT"); return s ? strtoull(s, 0, 10) : (size_t)1 << 30; }
static void note(const char* what, size_t n) {
  const char* f = getenv("STANDIN_LOG");
  if (!f) return;
  FILE* o = fopen(f, "a"); if (o) { fprintf(o, "%s %zu\\n", what, n); fclose(o); }
}
static void* ctx_of(P p) {
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].live && p >= allocs[i].p && p < allocs[i].p + allocs[i].n) return allocs[i].ctx;
  return (void*)-1;
}
typedef struct { void* stream; int done; } Ev;
int cuDeviceGetCount(int* n) { *n = 2; return 0; }
int cuDeviceGet(int* d, int i) { *d = i; return 0; }
int cuDevicePrimaryCtxRetain(void** c, int d) { *c = (void*)(long)(d + 1); return 0; }
int cuCtxSetCurrent(void* c) { cur = c; return 0; }
int cuGetErrorName(int e, const char** s) {
  *s = e == 201 ? "CUDA_ERROR_INVALID_CONTEXT" : e == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : e == 600 ? "CUDA_ERROR_NOT_READY" : "CUDA_ERROR_OTHER";
  return 0;
}
int cuMemAlloc_v2(P* p, size_t n) {
  if (cur == 0 || nallocs == 65536) return 201;
  if (live_bytes + n > limit()) { note("oom", n); return 2; }
  *p = (P)malloc(n); allocs[nallocs].p = *p; allocs[nallocs].n = n; allocs[nallocs].ctx = cur; allocs[nallocs].live = 1;
  nallocs++; live_bytes += n; note("alloc", n); return 0;
}
int cuMemFree_v2(P p) {
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].live && allocs[i].p == p) {
      if (allocs[i].ctx != cur) return 201;
      allocs[i].live = 0; live_bytes -= allocs[i].n; note("free", allocs[i].n); free((void*)p); return 0;
    }
  return 1;
}
int cuMemGetInfo_v2(size_t* f, size_t* t) { *t = limit(); *f = *t - live_bytes; return 0; }
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
int cuMemcpyHtoDAsync_v2(P d, const void* s, size_t n, void* st) { note("htod", n); return cuMemcpyHtoD_v2(d, s, n); }
int cuMemcpyDtoHAsync_v2(void* d, P s, size_t n, void* st) { note("dtoh", n); return cuMemcpyDtoH_v2(d, s, n); }
int cuMemcpyDtoDAsync_v2(P d, P s, size_t n, void* st) { note("dtod", n); return cuMemcpyDtoD_v2(d, s, n); }
int cuMemsetD8Async(P d, unsigned char v, size_t n, void* st) {
  if (ctx_of(d) != cur) return 201; note("memset", n); memset((void*)d, v, n); return 0;
}
int cuMemHostAlloc(void** p, size_t n, unsigned flags) { *p = malloc(n); note("hostalloc", n); return 0; }
int cuMemFreeHost(void* p) { free(p); note("hostfree", 0); return 0; }
static Ev* events[65536];
static int nevents = 0;
int cuStreamCreate(void** s, unsigned flags) { *s = malloc(16); note("stream", 0); return 0; }
int cuStreamDestroy_v2(void* s) { return 0; }
int cuStreamSynchronize(void* s) { for (int i = 0; i < nevents; i++) if (events[i]->stream == s) events[i]->done = 1; return 0; }
int cuStreamQuery(void* s) { return 0; }
int cuStreamWaitEvent(void* s, void* e, unsigned f) { return 0; }
int cuEventCreate(void** e, unsigned f) { Ev* v = calloc(1, sizeof(Ev)); events[nevents++] = v; *e = v; return 0; }
int cuEventRecord(void* e, void* s) { ((Ev*)e)->stream = s; ((Ev*)e)->done = 0; return 0; }
int cuEventQuery(void* e) {
  const char* d = getenv("STANDIN_EVENTS_DONE");
  return ((Ev*)e)->done || (d && d[0] == '1') ? 0 : 600;
}
int cuEventSynchronize(void* e) { ((Ev*)e)->done = 1; note("eventsync", 0); return 0; }
int cuEventDestroy_v2(void* e) { return 0; }
`;

/** Compiles the stand-in into `dir` (as libcuda.so.1) with stubs for the rest of `symbols`; returns dir. */
export function buildStandInDriver(dir: string, symbols: string[]): string {
  const defined = new Set([...DRIVER.matchAll(/^int (\w+)\(/gm)].map((m) => m[1]!));
  const rest = symbols.filter((s) => !defined.has(s)).map((s) => `int ${s}(void) { return 0; }`);
  fs.mkdirSync(dir, { recursive: true });
  const src = path.join(dir, "cuda.c");
  fs.writeFileSync(src, DRIVER + rest.join("\n") + "\n");
  const r = spawnSync("cc", ["-shared", "-fPIC", "-o", path.join(dir, "libcuda.so.1"), src], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`cc failed: ${r.stderr}`);
  return dir;
}
