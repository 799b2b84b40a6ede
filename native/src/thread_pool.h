// A small persistent thread pool for the CPU kernels. ParallelFor splits
// [0, n) into contiguous chunks, runs them on the pool's workers and on the
// calling (JS) thread, and returns when all are done. Work below `grain`
// elements runs inline: thread hand-off costs more than it saves.
#pragma once
#include <cstdint>
#include <functional>

namespace tprpc {

void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& fn);

// Threads used by ParallelFor, including the caller (default: hardware threads, at most 8).
int NumThreads();
void SetNumThreads(int n);

}  // namespace tprpc
