// The leanest 4 MB echo two processes can run over shared memory, as a control for the shm channel
// under load (docs/architecture.md, "shm under load"): no RPC, no V8, the same two land copies.
// Not part of `npm run bench`.
//
//   cc -O2 bench/control/pingpong.c -o /tmp/pingpong && /tmp/pingpong [extra_us=0] [slice_us=100]
//
// Each turn a process copies 4,000,000 bytes into the block its peer reads, spins `extra_us` of its
// own CPU time (a stand-in for the work an RPC does around the copy) and wakes the peer through a
// pipe. Both processes ask for a `slice_us` scheduler slice (sched_setattr's sched_runtime, as
// sdk/channel/latency_slice.ts does; 0 leaves the default). Timing follows bench/rpc_common.ts for
// 4 MB: 20 warm-up round trips, then the median over 20 trials of 10. Run it quiet and beside
// `node dist/bench/load.js --load-child < /dev/zero` processes to compare.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct sched_attr_v1 {
  uint32_t size, policy;
  uint64_t flags;
  int32_t nice;
  uint32_t priority;
  uint64_t runtime, deadline, period;
  uint32_t util_min, util_max;
};

enum { kWarm = 20, kTrials = 20, kBatch = 10 };
static const size_t kBytes = 4000000;

static double now(int clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void spin(double us) {
  double end = now(CLOCK_THREAD_CPUTIME_ID) + us * 1e-6;
  while (now(CLOCK_THREAD_CPUTIME_ID) < end) {
  }
}

static void set_slice(int us) {
  struct sched_attr_v1 a;
  memset(&a, 0, sizeof a);
  if (us <= 0 || syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) != 0) return;
  a.size = sizeof a;
  a.runtime = (uint64_t)us * 1000;
  syscall(SYS_sched_setattr, 0, &a, 0);
}

static int by_value(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static void must(int ok, const char* what) {
  if (!ok) {
    perror(what);
    exit(1);
  }
}

int main(int argc, char** argv) {
  double extra = argc > 1 ? atof(argv[1]) : 0;
  int slice = argc > 2 ? atoi(argv[2]) : 100;
  char* shared = mmap(NULL, 2 * kBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  must(shared != MAP_FAILED, "mmap");
  char* to_child = shared;           // the child's block: the parent copies into it
  char* to_parent = shared + kBytes;  // the parent's block: the child copies what it got into it
  int down[2], up[2];
  must(pipe(down) == 0 && pipe(up) == 0, "pipe");
  pid_t child = fork();
  must(child >= 0, "fork");
  set_slice(slice);
  char token = 0;
  if (child == 0) {
    for (int i = 0; i < kWarm + kTrials * kBatch; i++) {
      must(read(down[0], &token, 1) == 1, "read");
      memcpy(to_parent, to_child, kBytes);
      spin(extra);
      must(write(up[1], &token, 1) == 1, "write");
    }
    _exit(0);
  }
  char* src = malloc(kBytes);
  memset(src, 7, kBytes);
  double trial[kTrials];
  for (int t = -1; t < kTrials; t++) {
    int calls = t < 0 ? kWarm : kBatch;
    double t0 = now(CLOCK_MONOTONIC);
    for (int i = 0; i < calls; i++) {
      memcpy(to_child, src, kBytes);
      spin(extra);
      must(write(down[1], &token, 1) == 1, "write");
      must(read(up[0], &token, 1) == 1, "read");
    }
    if (t >= 0) trial[t] = (now(CLOCK_MONOTONIC) - t0) / calls;
  }
  waitpid(child, NULL, 0);
  qsort(trial, kTrials, sizeof trial[0], by_value);
  printf("4 MB echo, %.0f us extra per side, slice %d us: %.0f us (median of %d trials of %d)\n", extra, slice,
         (trial[kTrials / 2 - 1] + trial[kTrials / 2]) / 2 * 1e6, kTrials, kBatch);
  return 0;
}
