// Persistent pool behind ParallelFor. Workers sleep on a condition variable;
// a job is one function over chunk indices, taken by atomic counter, so the
// calling thread works too and waits only for the stragglers.
#include "thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace tprpc {
namespace {

class Pool {
 public:
  ~Pool() { Stop(); }

  void Resize(int total) {
    std::lock_guard<std::mutex> turn(run_mu_);
    Stop();
    stopping_ = false;
    for (int i = 1; i < total; ++i) workers_.emplace_back([this] { Loop(); });
    size_ = total;
  }

  int Size() const { return size_; }

  // Runs body(chunk) for chunk in [0, chunks). Callers from several JS threads (worker_threads)
  // take turns: one job owns the pool at a time.
  void Run(int64_t chunks, const std::function<void(int64_t)>& body) {
    std::lock_guard<std::mutex> turn(run_mu_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      body_ = &body;
      chunks_ = chunks;
      next_.store(0);
      done_.store(0);
      ++generation_;
    }
    cv_.notify_all();
    Work();
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return done_.load() == chunks_; });
    body_ = nullptr;
  }

 private:
  void Work() {
    for (;;) {
      int64_t c = next_.fetch_add(1);
      if (c >= chunks_) return;
      (*body_)(c);
      if (done_.fetch_add(1) + 1 == chunks_) {
        std::lock_guard<std::mutex> lock(mu_);
        done_cv_.notify_all();
      }
    }
  }

  // Worker thread: waits for a new generation, helps, repeats.
  void Loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || (generation_ != seen && body_ != nullptr); });
        if (stopping_) return;
        seen = generation_;
      }
      Work();
    }
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  std::mutex run_mu_;  // held for a whole job (see Run)
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  const std::function<void(int64_t)>* body_ = nullptr;
  int64_t chunks_ = 0;
  std::atomic<int64_t> next_{0}, done_{0};
  uint64_t generation_ = 0;
  bool stopping_ = false;
  int size_ = 1;
};

Pool& GetPool() {
  static Pool* pool = [] {
    auto* p = new Pool();  // NB: leaked on purpose; joining threads at process exit can deadlock.
    p->Resize(std::max(1, std::min(8, static_cast<int>(std::thread::hardware_concurrency()))));
    return p;
  }();
  return *pool;
}

}  // namespace

int NumThreads() { return GetPool().Size(); }

void SetNumThreads(int n) { GetPool().Resize(std::max(1, std::min(64, n))); }

void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  Pool& pool = GetPool();
  int threads = pool.Size();
  if (threads <= 1 || n <= grain) {
    fn(0, n);
    return;
  }
  int64_t chunks = std::min<int64_t>(threads * 4, (n + grain - 1) / grain);
  int64_t step = (n + chunks - 1) / chunks;
  chunks = (n + step - 1) / step;
  pool.Run(chunks, [&](int64_t c) { fn(c * step, std::min(n, (c + 1) * step)); });
}

}  // namespace tprpc
