// The floor under a large shm round trip: how fast one process can take N bytes out of another's
// memory with process_vm_readv (what the shm channel's direct reads do, native/src/channels/cma),
// against memcpy inside one process, each on 1 and 2 threads. Not part of `npm run bench`; a
// diagnostic for the numbers in docs/architecture.md ("A second machine type").
//
//   cc -O2 -pthread bench/control/vmread.c -o /tmp/vmread && /tmp/vmread [bytes=400000000] [reps=7]
//
// The parent fills a source (huge pages asked for, as tprpc's pool does) and forks; the child reads
// it into a destination of its own, warm (touched before, as a pooled receive buffer is) and cold (a
// fresh mapping each time, so the page faults count too), then copies its own warm copy with memcpy.
// Last, the same bytes in a memfd the parent wrote through a shared mapping (what a storage in shared
// memory would be): the child memcpys them out of its own mapping of that file, kept (warm) and made
// afresh each time with MAP_POPULATE (the mapping's cost included).
// Each line prints the median and the best of `reps` runs, in ms and GB/s.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static size_t n;
static pid_t peer;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static char* map(size_t bytes, int touch) {
  char* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  madvise(p, bytes, MADV_HUGEPAGE);
  if (touch) memset(p, 1, bytes);
  return p;
}

struct part {
  char* dst;
  const char* src;
  size_t len;
  int remote;
};

static void* run_part(void* arg) {
  struct part* p = arg;
  if (!p->remote) {
    memcpy(p->dst, p->src, p->len);
    return NULL;
  }
  size_t done = 0;
  while (done < p->len) {
    struct iovec l = {p->dst + done, p->len - done}, r = {(void*)(p->src + done), p->len - done};
    ssize_t k = process_vm_readv(peer, &l, 1, &r, 1, 0);
    if (k <= 0) {
      perror("process_vm_readv");
      exit(1);
    }
    done += (size_t)k;
  }
  return NULL;
}

static double copy(char* dst, const char* src, int threads, int remote) {
  pthread_t t[2];
  struct part parts[2];
  size_t half = (n / threads + 4095) / 4096 * 4096;
  double t0 = now_ms();
  for (int i = 0; i < threads; i++) {
    size_t off = half * i, len = i == threads - 1 ? n - off : half;
    parts[i] = (struct part){dst + off, src + off, len, remote};
    pthread_create(&t[i], NULL, run_part, &parts[i]);
  }
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  return now_ms() - t0;
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static void line(const char* what, double* ms, int reps) {
  qsort(ms, reps, sizeof *ms, cmp);
  printf("%-44s median %7.1f ms (%5.1f GB/s)  best %7.1f ms\n", what, ms[reps / 2], n / ms[reps / 2] / 1e6, ms[0]);
  fflush(stdout);
}

int main(int argc, char** argv) {
  n = argc > 1 ? strtoull(argv[1], NULL, 10) : 400000000ull;
  int reps = argc > 2 ? atoi(argv[2]) : 7;
  if (reps < 1 || reps > 64) reps = 7;
  char* src = map(n, 1);
  int fd = memfd_create("vmread", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)n) != 0) {
    perror("memfd");
    return 1;
  }
  char* shared = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (shared == MAP_FAILED) {
    perror("mmap memfd");
    return 1;
  }
  memset(shared, 1, n);
  pid_t parent = getpid();
  pid_t child = fork();
  if (child == 0) {
    peer = parent;
    double ms[64];
    char* warm = map(n, 1);
    for (int threads = 1; threads <= 2; threads++) {
      for (int r = 0; r < reps; r++) ms[r] = copy(warm, src, threads, 1);
      char what[64];
      snprintf(what, sizeof what, "process_vm_readv, warm destination, %d thr", threads);
      line(what, ms, reps);
      for (int r = 0; r < reps; r++) {
        char* cold = map(n, 0);
        ms[r] = copy(cold, src, threads, 1);
        munmap(cold, n);
      }
      snprintf(what, sizeof what, "process_vm_readv, fresh destination, %d thr", threads);
      line(what, ms, reps);
      // NB: the child's own copy of the source (copy-on-write after fork: written first, so its own)
      char* mine = map(n, 1);
      for (int r = 0; r < reps; r++) ms[r] = copy(warm, mine, threads, 0);
      snprintf(what, sizeof what, "memcpy in one process, warm, %d thr", threads);
      line(what, ms, reps);
      munmap(mine, n);
      // NB: a mapping of our own, not the one inherited from the parent
      char* view = mmap(NULL, n, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
      if (view == MAP_FAILED) _exit(1);
      for (int r = 0; r < reps; r++) ms[r] = copy(warm, view, threads, 0);
      snprintf(what, sizeof what, "memcpy out of a memfd, mapped once, %d thr", threads);
      line(what, ms, reps);
      munmap(view, n);
      for (int r = 0; r < reps; r++) {
        double t0 = now_ms();
        char* v = mmap(NULL, n, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
        if (v == MAP_FAILED) _exit(1);
        copy(warm, v, threads, 0);
        ms[r] = now_ms() - t0;
        munmap(v, n);
      }
      snprintf(what, sizeof what, "memcpy out of a memfd, mapped each time, %d thr", threads);
      line(what, ms, reps);
    }
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
