// Device blocks and the JS objects that own them (a tensor storage's DeviceMemory), held weakly, so
// that the blocks of owners V8 collected can be freed synchronously, in the middle of a JS job.
//
// Why not a FinalizationRegistry: its callbacks run only between tasks, so a synchronous training
// loop (forward, backward, step, item(); no await) never frees anything. A napi reference with
// refcount 0 is a weak V8 global handle; V8 clears it during the collection that finds its object
// dead (the first-pass weak callback), so a Sweep() right after a gc() in the same job sees it
// empty. (A JS WeakRef is no use here: deref() keeps its target alive until the job ends.)
// test/native/block_tracker.test.ts checks this, and that a live owner keeps its block.
//
// A tracked block is freed only by Sweep (or never): once, and only after its owner is gone.
// Thread: JS thread, one tracker per namespace object (so per env).
#pragma once
#include <napi.h>

#include <cstdint>
#include <vector>

namespace tprpc {
namespace gpu {

class BlockTracker {
 public:
  // Frees one block (the caching allocator's Free, or the emulated device's); may throw, and the
  // sweep then counts the block as freed (its owner is gone either way) and goes on.
  using FreeFn = void (*)(Napi::Env env, int device, uint64_t ptr);
  struct Swept {
    size_t bytes = 0;
    size_t blocks = 0;
    size_t failed = 0;  // frees that threw (counted in bytes and blocks too)
  };

  explicit BlockTracker(FreeFn free) : free_(free) {}
  BlockTracker(const BlockTracker&) = delete;
  BlockTracker& operator=(const BlockTracker&) = delete;

  // Starts tracking [ptr, ptr + bytes) on `device`, owned by the object `owner`.
  void Track(Napi::Env env, napi_value owner, int device, uint64_t ptr, size_t bytes);
  // Frees every block whose owner was collected.
  Swept Sweep(Napi::Env env);

  size_t live_bytes() const { return live_bytes_; }
  size_t live_blocks() const { return live_.size(); }
  uint64_t sweeps() const { return sweeps_; }
  uint64_t freed_blocks() const { return freed_blocks_; }

  // Forgets every block without freeing it or touching its reference: at env teardown, when Node
  // deletes the references itself and the process (or worker) is going away.
  void Abandon() { live_.clear(); }

 private:
  struct Entry {
    napi_ref owner;
    uint64_t ptr;
    size_t bytes;
    int device;
  };
  FreeFn free_;
  std::vector<Entry> live_;
  size_t live_bytes_ = 0;
  uint64_t sweeps_ = 0;
  uint64_t freed_blocks_ = 0;
};

// Adds to `ns` a tracker whose sweep frees with `free`:
//   trackBlock(owner, device, ptr, bytes)
//   sweepBlocks() -> { bytes, blocks, failed }     (the blocks of collected owners, now freed)
//   trackedBlocks() -> { bytes, blocks, sweeps, freedBlocks }
void AddBlockTracker(Napi::Env env, Napi::Object ns, BlockTracker::FreeFn free);

}  // namespace gpu
}  // namespace tprpc
