// Pinned (page-locked) host memory, cached as torch's CachingHostAllocator:
//
// 1. Alloc rounds a request up to a power of two (at least 4 KiB) and hands
//    out a cached block of that size, else a new one from cuMemHostAlloc
//    (portable: usable from every device's context).
// 2. An asynchronous copy from or to a block records an event on the copy's
//    stream (RecordUse); a freed block is reused only once its events completed,
//    so a non-blocking copy never reads bytes the next user already overwrote.
// 3. When cuMemHostAlloc fails, unused cached blocks are returned to the driver
//    (EmptyCache) and the allocation retried once.
// 4. Contains() says whether a host range lies in a block handed out here:
//    what Tensor.isPinned() asks.
//
// Thread: JS thread only (the bindings; finalizers of pinned ArrayBuffers run
// there too). Events are created in whatever context is current.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "gpu/caching_allocator.h"

namespace tprpc {
namespace gpu {

struct HostStats {
  Stat allocated_bytes, reserved_bytes;
  int64_t num_host_alloc = 0, num_host_free = 0;
};

class HostAllocator {
 public:
  explicit HostAllocator(const CudaDriver& d) : d_(d) {}
  HostAllocator(const HostAllocator&) = delete;
  HostAllocator& operator=(const HostAllocator&) = delete;

  // A pinned block of at least `size` bytes; throws CudaError (EOOM, ECUDA).
  void* Alloc(size_t size);
  // Back to the cache (reusable once its recorded events completed).
  void Free(void* ptr);
  // An async copy touching the block holding `ptr` was queued on `stream`.
  void RecordUse(const void* ptr, CUstream stream);
  bool Contains(const void* ptr, size_t bytes) const;
  void EmptyCache();
  const HostStats& stats() const { return stats_; }

 private:
  struct HostBlock {
    void* ptr = nullptr;
    size_t size = 0;
    bool in_use = false;
    std::vector<CUevent> events;
  };
  HostBlock* Find(const void* ptr) const;
  bool Ready(HostBlock* b);

  const CudaDriver& d_;
  std::map<uintptr_t, HostBlock*> blocks_;  // every block by address
  std::multimap<size_t, HostBlock*> free_;  // freed blocks by size
  std::vector<CUevent> spare_events_;
  HostStats stats_;
};

}  // namespace gpu
}  // namespace tprpc
