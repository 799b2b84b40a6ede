// A 4 MB copy into memory another core read last, with memcpy and with streaming stores: what the
// shm channel's land copy (native/src/channels/shm/landing.cc, StreamCopy) pays on each. Not part of
// `npm run bench`; a diagnostic for the numbers in docs/architecture.md ("shm under load").
//
//   cc -O2 -pthread bench/control/xcopy.c -o /tmp/xcopy && /tmp/xcopy 0 1 [bytes=4000000]
//
// Two threads pinned to the two given CPUs take turns (a spin flag, no sleeping): the writer copies
// a source into a shared block, then the reader copies the block out, 300 rounds; prints the mean
// time of each copy, first with memcpy, then with streaming stores. On a VM the vCPUs' placement on
// the host can change between runs; compare the two lines of one run.
#define _GNU_SOURCE
#include <emmintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static size_t n = 4000000;
static char *src, *block, *dst;
static atomic_int turn;
static int stream, writer_cpu, reader_cpu;
static double t_write, t_read;
enum { kRounds = 300 };

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void stream_copy(char* d, const char* s, size_t len) {
  size_t i = 0;
  for (; i + 64 <= len; i += 64)
    for (int k = 0; k < 64; k += 16)
      _mm_stream_si128((__m128i*)(d + i + k), _mm_loadu_si128((const __m128i*)(s + i + k)));
  memcpy(d + i, s + i, len - i);
  _mm_sfence();
}

static void* writer(void* arg) {
  (void)arg;
  pin(writer_cpu);
  for (int r = 0; r < kRounds; r++) {
    while (atomic_load(&turn) != 0) {
    }
    double t = now();
    if (stream) stream_copy(block, src, n);
    else memcpy(block, src, n);
    t_write += now() - t;
    atomic_store(&turn, 1);
  }
  return NULL;
}

static void* reader(void* arg) {
  (void)arg;
  pin(reader_cpu);
  for (int r = 0; r < kRounds; r++) {
    while (atomic_load(&turn) != 1) {
    }
    double t = now();
    memcpy(dst, block, n);
    t_read += now() - t;
    atomic_store(&turn, 0);
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: xcopy WRITER_CPU READER_CPU [bytes]\n");
    return 2;
  }
  writer_cpu = atoi(argv[1]);
  reader_cpu = atoi(argv[2]);
  if (argc > 3) n = strtoull(argv[3], NULL, 10);
  src = aligned_alloc(64, (n + 63) / 64 * 64);
  block = aligned_alloc(64, (n + 63) / 64 * 64);
  dst = aligned_alloc(64, (n + 63) / 64 * 64);
  memset(src, 1, n);
  memset(block, 2, n);
  memset(dst, 3, n);
  for (stream = 0; stream < 2; stream++) {
    t_write = t_read = 0;
    atomic_store(&turn, 0);
    pthread_t a, b;
    pthread_create(&a, NULL, writer, NULL);
    pthread_create(&b, NULL, reader, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("%-9s %zu B: write (cpu %d) %.0f us, read (cpu %d) %.0f us\n", stream ? "streamed" : "memcpy", n,
           writer_cpu, t_write / kRounds * 1e6, reader_cpu, t_read / kRounds * 1e6);
  }
  return 0;
}
