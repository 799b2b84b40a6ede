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
 *   async copy or memset appends a line ("alloc 2097152", "free 2097152", "htod 4194304");
 *   IPC calls too ("ipcgetmem 2097152", "ipcopen 2097152", "ipcclose 2097152", "ipcgetevent
 *   <event id>", "ipcopenevent <event id>"). With STANDIN_LOG_EVENTS=1 also event and stream-wait
 *   calls ("eventcreate <flags>", "eventrecord <id>", "streamwait <id>", "eventquery <id> ready" or
 *   "... notready", "eventwait <id>" and "eventdone <id>" around a cuEventSynchronize, "eventdestroy <id>"). With STANDIN_NAME set each line starts with it, so two
 *   processes can share one log (lines appended whole, in call order);
 * - IPC between real processes: with STANDIN_IPC_DIR set, device memory is a shared file mapped
 *   there ("mem-<pid>-<n>") and an INTERPROCESS event lives in one ("ev-<pid>-<n>"); a handle
 *   names the file, and opening it maps the same bytes (or event) in the other process. Opening a
 *   handle that this process already opened fails with CUDA_ERROR_ALREADY_MAPPED (208), as CUDA's;
 *   cuIpcGetEventHandle on an event without CU_EVENT_INTERPROCESS fails (1);
 * - STANDIN_EVENT_QUERIES=k: a recorded event completes at its k-th query (else as above);
 *   STANDIN_EVENT_SYNC_MS=ms: cuEventSynchronize takes that long (a copy still running).
 * Event ids in the log are (pid % 100000) * 1000 + n, the same in both processes for a shared event.
 * Every other symbol of dynlib's table returns 0.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

const DRIVER = `
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
typedef unsigned long long P;
typedef struct { char r[64]; } H;
static void* cur = 0;
/* opened: mapped from a peer's handle (name), not allocated here */
static struct { P p; size_t n; void* ctx; int live; int shared; int opened; char name[48]; } allocs[65536];
static int nallocs = 0;
static size_t live_bytes = 0;
static int nfiles = 0;
static size_t limit(void) { const char* s = getenv("STANDIN_MEM_LIMIT"); return s ? strtoull(s, 0, 10) : (size_t)1 << 30; }
static void line(const char* text) {
  const char* f = getenv("STANDIN_LOG");
  if (!f) return;
  const char* who = getenv("STANDIN_NAME");
  char buf[256];
  int k = snprintf(buf, sizeof buf, "%s%s%s\\n", who ? who : "", who ? " " : "", text);
  int fd = open(f, O_WRONLY | O_APPEND | O_CREAT, 0644); /* one write: whole lines from two processes */
  if (fd >= 0) { if (write(fd, buf, k) < 0) {} close(fd); }
}
static void note(const char* what, size_t n) { char t[128]; snprintf(t, sizeof t, "%s %zu", what, n); line(t); }
static void note_ev(const char* what, long id, const char* tail) {
  const char* on = getenv("STANDIN_LOG_EVENTS");
  if (!on || on[0] != '1') return;
  char t[128]; snprintf(t, sizeof t, "%s %ld%s", what, id, tail); line(t);
}
/* A shared file of n bytes under STANDIN_IPC_DIR, mapped; name gets its file name. */
static void* map_file(const char* name, size_t n, int create) {
  char path[512]; snprintf(path, sizeof path, "%s/%s", getenv("STANDIN_IPC_DIR"), name);
  int fd = open(path, create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
  if (fd < 0) return 0;
  if (create && ftruncate(fd, n) != 0) { close(fd); return 0; }
  void* p = mmap(0, n ? n : 1, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return p == MAP_FAILED ? 0 : p;
}
static void unlink_file(const char* name) {
  char path[512]; snprintf(path, sizeof path, "%s/%s", getenv("STANDIN_IPC_DIR"), name); unlink(path);
}
static void* ctx_of(P p) {
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].live && p >= allocs[i].p && p < allocs[i].p + allocs[i].n) return allocs[i].ctx;
  return (void*)-1;
}
typedef struct { void* stream; int done; int queries; int ipc; long id; char name[48]; } Ev;
int cuDeviceGetCount(int* n) { *n = 2; return 0; }
int cuDeviceGet(int* d, int i) { *d = i; return 0; }
int cuDevicePrimaryCtxRetain(void** c, int d) { *c = (void*)(long)(d + 1); return 0; }
int cuCtxSetCurrent(void* c) { cur = c; return 0; }
int cuGetErrorName(int e, const char** s) {
  *s = e == 201 ? "CUDA_ERROR_INVALID_CONTEXT" : e == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : e == 600 ? "CUDA_ERROR_NOT_READY"
     : e == 208 ? "CUDA_ERROR_ALREADY_MAPPED" : e == 400 ? "CUDA_ERROR_INVALID_HANDLE" : e == 1 ? "CUDA_ERROR_INVALID_VALUE"
     : "CUDA_ERROR_OTHER";
  return 0;
}
int cuMemAlloc_v2(P* p, size_t n) {
  if (cur == 0 || nallocs == 65536) return 201;
  if (live_bytes + n > limit()) { note("oom", n); return 2; }
  memset(&allocs[nallocs], 0, sizeof allocs[0]);
  if (getenv("STANDIN_IPC_DIR")) {
    snprintf(allocs[nallocs].name, sizeof allocs[0].name, "mem-%d-%d", (int)getpid(), nfiles++);
    *p = (P)map_file(allocs[nallocs].name, n, 1);
    if (*p == 0) return 2;
    allocs[nallocs].shared = 1;
  } else *p = (P)malloc(n);
  allocs[nallocs].p = *p; allocs[nallocs].n = n; allocs[nallocs].ctx = cur; allocs[nallocs].live = 1;
  nallocs++; live_bytes += n; note("alloc", n); return 0;
}
int cuMemFree_v2(P p) {
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].live && !allocs[i].opened && allocs[i].p == p) {
      if (allocs[i].ctx != cur) return 201;
      allocs[i].live = 0; live_bytes -= allocs[i].n; note("free", allocs[i].n);
      if (allocs[i].shared) { munmap((void*)p, allocs[i].n ? allocs[i].n : 1); unlink_file(allocs[i].name); }
      else free((void*)p);
      return 0;
    }
  return 1;
}
int cuMemGetAddressRange_v2(P* base, size_t* size, P p) {
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].live && p >= allocs[i].p && p < allocs[i].p + allocs[i].n) {
      if (base) *base = allocs[i].p;
      if (size) *size = allocs[i].n;
      return 0;
    }
  return 1;
}
int cuIpcGetMemHandle(H* h, P p) {
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].live && allocs[i].shared && !allocs[i].opened && allocs[i].p == p) {
      memset(h, 0, sizeof *h);
      memcpy(h->r, &allocs[i].n, 8);
      strcpy(h->r + 8, allocs[i].name);
      note("ipcgetmem", allocs[i].n);
      return 0;
    }
  return 1;
}
int cuIpcOpenMemHandle_v2(P* p, H h, unsigned flags) {
  size_t n; memcpy(&n, h.r, 8);
  if (cur == 0 || nallocs == 65536) return 201;
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].live && allocs[i].opened && strcmp(allocs[i].name, h.r + 8) == 0) return 208;
  void* m = map_file(h.r + 8, n, 0);
  if (m == 0) return 400; /* CUDA_ERROR_INVALID_HANDLE */
  memset(&allocs[nallocs], 0, sizeof allocs[0]);
  strcpy(allocs[nallocs].name, h.r + 8);
  allocs[nallocs].p = (P)m; allocs[nallocs].n = n; allocs[nallocs].ctx = cur; allocs[nallocs].live = 1;
  allocs[nallocs].shared = allocs[nallocs].opened = 1;
  nallocs++; *p = (P)m; note("ipcopen", n); return 0;
}
int cuIpcCloseMemHandle(P p) {
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].live && allocs[i].opened && allocs[i].p == p) {
      allocs[i].live = 0; munmap((void*)p, allocs[i].n ? allocs[i].n : 1); note("ipcclose", allocs[i].n); return 0;
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
int cuStreamWaitEvent(void* s, void* e, unsigned f) { note_ev("streamwait", ((Ev*)e)->id, ""); return 0; }
int cuEventCreate(void** e, unsigned f) {
  if (nevents == 65536) return 2;
  long id = (long)(getpid() % 100000) * 1000 + nevents;
  Ev* v;
  if ((f & 4) && getenv("STANDIN_IPC_DIR")) {
    char name[48]; snprintf(name, sizeof name, "ev-%d-%d", (int)getpid(), nfiles++);
    v = map_file(name, sizeof(Ev), 1);
    if (!v) return 2;
    strcpy(v->name, name); v->ipc = 1;
  } else v = calloc(1, sizeof(Ev));
  v->id = id; events[nevents++] = v; *e = v;
  note_ev("eventcreate", (long)f, "");
  return 0;
}
int cuEventRecord(void* e, void* s) {
  Ev* v = e; v->stream = s; v->done = 0; v->queries = 0; note_ev("eventrecord", v->id, ""); return 0;
}
int cuEventQuery(void* e) {
  Ev* v = e;
  const char* d = getenv("STANDIN_EVENTS_DONE");
  const char* k = getenv("STANDIN_EVENT_QUERIES");
  if (k && ++v->queries >= atoi(k)) v->done = 1;
  int ready = v->done || (d && d[0] == '1');
  note_ev("eventquery", v->id, ready ? " ready" : " notready");
  return ready ? 0 : 600;
}
int cuEventSynchronize(void* e) {
  Ev* v = e;
  const char* ms = getenv("STANDIN_EVENT_SYNC_MS");
  note_ev("eventwait", v->id, "");
  if (ms) usleep(atoi(ms) * 1000);
  v->done = 1; note("eventsync", 0); note_ev("eventdone", v->id, "");
  return 0;
}
int cuEventDestroy_v2(void* e) { note_ev("eventdestroy", ((Ev*)e)->id, ""); return 0; }
int cuIpcGetEventHandle(H* h, void* e) {
  Ev* v = e;
  if (!v->ipc) return 1;
  memset(h, 0, sizeof *h); strcpy(h->r, v->name); note("ipcgetevent", (size_t)v->id); return 0;
}
int cuIpcOpenEventHandle(void** e, H h) {
  if (nevents == 65536) return 2;
  Ev* v = map_file(h.r, sizeof(Ev), 0);
  if (!v) return 400;
  events[nevents++] = v; *e = v; note("ipcopenevent", (size_t)v->id); return 0;
}
`;

/**
 * Compiles the stand-in into `dir` (as libcuda.so.1) with stubs for the rest of `symbols`; returns dir.
 * `hide` leaves those symbols out (renamed at compile time), as an older driver would lack them.
 */
export function buildStandInDriver(dir: string, symbols: string[], hide: string[] = []): string {
  const defined = new Set([...DRIVER.matchAll(/^int (\w+)\(/gm)].map((m) => m[1]!));
  const rest = symbols.filter((s) => !defined.has(s) && !hide.includes(s)).map((s) => `int ${s}(void) { return 0; }`);
  fs.mkdirSync(dir, { recursive: true });
  const src = path.join(dir, "cuda.c");
  fs.writeFileSync(src, DRIVER + rest.join("\n") + "\n");
  const renames = hide.map((s) => `-D${s}=hidden_${s}`);
  const out = path.join(dir, "libcuda.so.1");
  const r = spawnSync("cc", ["-shared", "-fPIC", ...renames, "-o", out, src], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`cc failed: ${r.stderr}`);
  return dir;
}
