/**
 * A stand-in libnccl.so.2 for tests, compiled here with cc (like ./cuda_standin.ts's libcuda, whose
 * host-memory "device" pointers it reads and writes). Ranks are real processes that meet through
 * files in STANDIN_NCCL_DIR:
 * - ncclGetUniqueId writes "standin-<pid>-<n>" into the 128-byte id;
 * - ncclCommInitRank creates "<id>.rank<r>" and waits (bounded: STANDIN_NCCL_TIMEOUT_MS, default
 *   10000) until every rank's file exists, as NCCL blocks until every rank joined; with
 *   STANDIN_NCCL_FAIL_RANK=r, rank r fails at once with ncclSystemError (2);
 * - ncclSend writes the bytes to "<id>.<from>to<to>.<seq>" (written whole, then renamed), ncclRecv
 *   waits (bounded) for the matching file and reads it, so sends and recvs match in order per
 *   direction, as NCCL's point-to-point calls do; a size mismatch is ncclInvalidUsage (5);
 * - ncclCommGetAsyncError reports STANDIN_NCCL_ASYNC_ERROR (default 0).
 * With STANDIN_LOG set, each call appends a line ("ncclinit <rank>/<nranks>", "ncclsend <bytes> <peer>",
 * "ncclrecv <bytes> <peer>", "nccldestroy", "ncclabort", "ncclgroupstart", "ncclgroupend"), prefixed
 * with STANDIN_NAME when set. The stream argument is ignored: copies happen in the call.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

const NCCL = `
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
typedef struct { char internal[128]; } Id;
typedef struct { char id[128]; int rank, nranks; int sent[64], recvd[64]; } Comm;
static int ids = 0;
static void line(const char* text) {
  const char* f = getenv("STANDIN_LOG");
  if (!f) return;
  const char* who = getenv("STANDIN_NAME");
  char buf[256];
  int k = snprintf(buf, sizeof buf, "%s%s%s\\n", who ? who : "", who ? " " : "", text);
  int fd = open(f, O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd >= 0) { if (write(fd, buf, k) < 0) {} close(fd); }
}
static const char* dir(void) { const char* d = getenv("STANDIN_NCCL_DIR"); return d ? d : "/tmp"; }
static long timeout_ms(void) { const char* t = getenv("STANDIN_NCCL_TIMEOUT_MS"); return t ? atol(t) : 10000; }
static int exists(const char* p) { struct stat st; return stat(p, &st) == 0; }
/* Waits until path exists; 0 when it did within the timeout. */
static int wait_for(const char* p) {
  for (long waited = 0; !exists(p); waited += 2) {
    if (waited > timeout_ms()) return -1;
    struct timespec ts = {0, 2000000}; nanosleep(&ts, 0);
  }
  return 0;
}
int ncclGetVersion(int* v) { *v = 22105; return 0; }
const char* ncclGetErrorString(int r) {
  return r == 0 ? "no error" : r == 2 ? "unhandled system error (stand-in)" : r == 4 ? "invalid argument"
       : r == 5 ? "invalid usage (stand-in)" : "stand-in NCCL error";
}
int ncclGetUniqueId(Id* id) {
  memset(id, 0, sizeof *id); snprintf(id->internal, sizeof id->internal, "standin-%d-%d", (int)getpid(), ids++); return 0;
}
int ncclCommInitRank(Comm** out, int nranks, Id id, int rank) {
  char t[64]; snprintf(t, sizeof t, "ncclinit %d/%d", rank, nranks); line(t);
  const char* f = getenv("STANDIN_NCCL_FAIL_RANK");
  if (f && atoi(f) == rank) return 2;
  if (nranks < 1 || rank < 0 || rank >= nranks || nranks > 64 || id.internal[0] == 0) return 4;
  char p[512];
  snprintf(p, sizeof p, "%s/%s.rank%d", dir(), id.internal, rank);
  int fd = open(p, O_WRONLY | O_CREAT, 0644); if (fd < 0) return 2; close(fd);
  for (int r = 0; r < nranks; r++) {
    snprintf(p, sizeof p, "%s/%s.rank%d", dir(), id.internal, r);
    if (wait_for(p) != 0) return 2;
  }
  Comm* c = calloc(1, sizeof(Comm)); memcpy(c->id, id.internal, 128); c->rank = rank; c->nranks = nranks;
  *out = c; return 0;
}
int ncclCommDestroy(Comm* c) { line("nccldestroy"); free(c); return 0; }
int ncclCommAbort(Comm* c) { line("ncclabort"); free(c); return 0; }
int ncclCommGetAsyncError(Comm* c, int* r) { const char* e = getenv("STANDIN_NCCL_ASYNC_ERROR"); *r = e ? atoi(e) : 0; return 0; }
int ncclGroupStart(void) { line("ncclgroupstart"); return 0; }
int ncclGroupEnd(void) { line("ncclgroupend"); return 0; }
int ncclSend(const void* buf, size_t count, int type, int peer, Comm* c, void* stream) {
  char t[64]; snprintf(t, sizeof t, "ncclsend %zu %d", count, peer); line(t);
  if (type != 1 || peer < 0 || peer >= c->nranks) return 4;
  char p[512], tmp[520];
  snprintf(p, sizeof p, "%s/%s.%dto%d.%d", dir(), c->id, c->rank, peer, c->sent[peer]++);
  snprintf(tmp, sizeof tmp, "%s.tmp", p);
  FILE* o = fopen(tmp, "wb"); if (!o) return 2;
  if (count && fwrite(buf, 1, count, o) != count) { fclose(o); return 2; }
  fclose(o); return rename(tmp, p) == 0 ? 0 : 2;
}
int ncclRecv(void* buf, size_t count, int type, int peer, Comm* c, void* stream) {
  char t[64]; snprintf(t, sizeof t, "ncclrecv %zu %d", count, peer); line(t);
  if (type != 1 || peer < 0 || peer >= c->nranks) return 4;
  char p[512];
  snprintf(p, sizeof p, "%s/%s.%dto%d.%d", dir(), c->id, peer, c->rank, c->recvd[peer]++);
  if (wait_for(p) != 0) return 2;
  struct stat st; stat(p, &st);
  if ((size_t)st.st_size != count) return 5;
  FILE* i = fopen(p, "rb"); if (!i) return 2;
  size_t got = count ? fread(buf, 1, count, i) : 0; fclose(i); unlink(p);
  return got == count ? 0 : 2;
}
int ncclAllReduce(void) { return 5; }
int ncclBroadcast(void) { return 5; }
`;

/** Compiles the stand-in into `dir` as libnccl.so.2; returns dir. `hide` leaves those symbols out (an older NCCL). */
export function buildStandInNccl(dir: string, hide: string[] = []): string {
  fs.mkdirSync(dir, { recursive: true });
  const src = path.join(dir, "nccl.c");
  fs.writeFileSync(src, NCCL);
  const renames = hide.map((s) => `-D${s}=hidden_${s}`);
  const out = path.join(dir, "libnccl.so.2");
  const r = spawnSync("cc", ["-shared", "-fPIC", ...renames, "-o", out, src], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`cc failed: ${r.stderr}`);
  return dir;
}
