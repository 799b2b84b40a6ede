// The two launchers of launcher.h. See that file for the contract.
//
// Emulated launches: blocks run in order; a kernel without barriers runs each
// thread to completion in turn. A kernel with barriers (HostKernel::sync) runs
// the block's threads as ucontext fibers: each runs until it reaches
// __syncthreads (SyncThreads below) or returns, and the scheduler starts the
// next pass once every thread has arrived, so shared memory holds what it holds
// on a GPU. A barrier that some threads never reach is reported as an error.
//
// Thread: the calling thread (the JS thread); g_emu_mutex serializes grids.
#include "cuda/launcher.h"

#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "cuda/shim.h"

namespace tprpc {
namespace cuda {

namespace emu {
dim3 g_thread_idx, g_block_idx, g_block_dim, g_grid_dim;
}

namespace {

std::vector<const HostKernel*>& Registry() {
  static std::vector<const HostKernel*> kernels;
  return kernels;
}

// ---- fibers for kernels with barriers -------------------------------------------------------------
constexpr size_t kFiberStack = 64 * 1024;
enum FiberState : char { kReady = 0, kAtBarrier = 1, kDone = 2 };

struct Fibers {
  std::vector<ucontext_t> ctx;
  std::vector<std::unique_ptr<char[]>> stacks;
  std::vector<char> state;
  ucontext_t sched;
  unsigned current = 0;
  const HostKernel* kernel = nullptr;
  const void* params = nullptr;
  bool active = false;
};
Fibers g_fibers;
std::mutex g_emu_mutex;

void FiberMain() {
  g_fibers.kernel->fn(g_fibers.params);
  g_fibers.state[g_fibers.current] = kDone;
  // returning resumes uc_link: the scheduler
}

void SetThread(unsigned t) {
  emu::g_thread_idx = dim3(t % emu::g_block_dim.x, 1, 1);
  emu::g_thread_idx.y = 0;
  emu::g_thread_idx.z = 0;
}

// Runs one block of a kernel with barriers; throws on a barrier not every thread reached.
void RunBlockAsFibers(unsigned threads) {
  Fibers& f = g_fibers;
  if (f.ctx.size() < threads) {
    f.ctx.resize(threads);
    f.state.resize(threads);
    while (f.stacks.size() < threads) f.stacks.emplace_back(new char[kFiberStack]);
  }
  for (unsigned t = 0; t < threads; ++t) {
    getcontext(&f.ctx[t]);
    f.ctx[t].uc_stack.ss_sp = f.stacks[t].get();
    f.ctx[t].uc_stack.ss_size = kFiberStack;
    f.ctx[t].uc_link = &f.sched;
    makecontext(&f.ctx[t], FiberMain, 0);
    f.state[t] = kReady;
  }
  for (;;) {
    for (unsigned t = 0; t < threads; ++t) {
      if (f.state[t] == kDone) continue;
      f.state[t] = kReady;
      f.current = t;
      SetThread(t);
      swapcontext(&f.sched, &f.ctx[t]);
    }
    unsigned done = 0;
    for (unsigned t = 0; t < threads; ++t) done += f.state[t] == kDone;
    if (done == threads) return;
    if (done != 0)
      throw std::runtime_error(std::string("kernel ") + f.kernel->name +
                               ": __syncthreads was not reached by every thread of the block (" +
                               std::to_string(done) + " of " + std::to_string(threads) + " returned)");
  }
}

class EmulatedLauncher : public Launcher {
 public:
  const char* Mode() const override { return "emulate"; }

  void Launch(int, const char* name, unsigned grid, unsigned block, const void* params, size_t size) override {
    const HostKernel* k = FindHostKernel(name);
    if (k == nullptr) throw std::runtime_error(std::string("no host kernel named ") + name);
    if (k->param_size != size)
      throw std::runtime_error(std::string("kernel ") + name + ": parameter size " + std::to_string(size) +
                               " != " + std::to_string(k->param_size));
    if (grid == 0 || block == 0 || block > 1024)
      throw std::runtime_error(std::string("kernel ") + name + ": bad launch shape " + std::to_string(grid) + " x " +
                               std::to_string(block));
    std::lock_guard<std::mutex> lock(g_emu_mutex);
    emu::g_grid_dim = dim3(grid);
    emu::g_block_dim = dim3(block);
    g_fibers.kernel = k;
    g_fibers.params = params;
    for (unsigned b = 0; b < grid; ++b) {
      emu::g_block_idx = dim3(b);
      emu::g_block_idx.y = emu::g_block_idx.z = 0;
      if (k->sync) {
        g_fibers.active = true;
        try {
          RunBlockAsFibers(block);
        } catch (...) {
          g_fibers.active = false;
          throw;
        }
        g_fibers.active = false;
      } else {
        for (unsigned t = 0; t < block; ++t) {
          SetThread(t);
          k->fn(params);
        }
      }
    }
  }

  bool Gemm(int, const GemmArgs& g) override { return EmulatedGemm(g); }

  unsigned long long ErrorWord(int) override { return reinterpret_cast<unsigned long long>(err_); }

  void TakeError(int, long long out[kErrorWords]) override {
    for (int i = 0; i < kErrorWords; ++i) {
      out[i] = err_[i];
      err_[i] = 0;
    }
  }

 private:
  long long err_[kErrorWords] = {};
};

}  // namespace

namespace emu {
void SyncThreads() {
  Fibers& f = g_fibers;
  if (!f.active) {
    // NB: a kernel declared without `sync` called BlockReduce; no fiber to switch from.
    std::fprintf(stderr, "tprpc: kernel %s calls __syncthreads but is not declared sync\n",
                 f.kernel ? f.kernel->name : "?");
    std::abort();
  }
  f.state[f.current] = kAtBarrier;
  swapcontext(&f.ctx[f.current], &f.sched);
}
}  // namespace emu

HostKernel::HostKernel(const char* n, void (*f)(const void*), size_t s, bool y)
    : name(n), fn(f), param_size(s), sync(y) {
  Registry().push_back(this);
}

const HostKernel* FindHostKernel(const std::string& name) {
  for (const HostKernel* k : Registry())
    if (name == k->name) return k;
  return nullptr;
}

size_t HostKernelCount() { return Registry().size(); }

std::unique_ptr<Launcher> MakeEmulatedLauncher() { return std::unique_ptr<Launcher>(new EmulatedLauncher()); }

}  // namespace cuda
}  // namespace tprpc
