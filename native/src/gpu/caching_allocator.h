// The CUDA caching allocator: one per device, handing out device memory for
// tensors from segments it keeps instead of calling cuMemAlloc/cuMemFree for
// every tensor (both synchronize the device), as torch's CUDACachingAllocator:
//
// 1. A request is rounded up to 512 bytes. Requests up to 1 MiB come from the
//    small pool, carved from 2 MiB segments; larger ones from the large pool
//    (segments of 20 MiB up to 10 MiB requests, else the request rounded up
//    to 2 MiB).
// 2. A block belongs to the stream it was allocated on and is only reused for
//    requests on that stream: work queued there runs in order, so the next
//    user cannot touch it before the previous one finished.
// 3. The best-fitting free block (smallest, then lowest address) is taken and
//    split when the rest is worth keeping (>= 512 B in the small pool, > 1 MiB
//    in the large one); a freed block merges with free neighbours of its segment.
// 4. A block used on other streams too (RecordStream) is not reusable when it
//    is freed: an event is recorded on each such stream, and the block returns
//    to its pool once every event completed (checked at the next Malloc).
// 5. When cuMemAlloc reports out of memory, pending events are waited for,
//    every cached segment with nothing in use is freed (EmptyCache) and the
//    allocation retried once; a second failure is an OutOfMemory error whose
//    message gives the sizes, as torch's.
//
// Thread: every method runs on the JS thread, with the device's context current
// (the bindings in cuda_memory.cc make it so); there is no locking.
#pragma once
#include <cstddef>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "gpu/gpu_api.h"

namespace tprpc {
namespace gpu {

constexpr size_t kMinBlockSize = 512;
constexpr size_t kSmallSize = size_t(1) << 20;
constexpr size_t kSmallBuffer = size_t(2) << 20;
constexpr size_t kLargeBuffer = size_t(20) << 20;
constexpr size_t kMinLargeAlloc = size_t(10) << 20;
constexpr size_t kRoundLarge = size_t(2) << 20;

// A failed driver call ("ECUDA") or an allocation that does not fit ("EOOM").
struct CudaError : std::runtime_error {
  CudaError(std::string c, const std::string& m) : std::runtime_error(m), code(std::move(c)) {}
  std::string code;
};

// "CUDA_ERROR_X (n)" for a driver result.
std::string CuErrorText(const CudaDriver& d, CUresult rc);
// Throws CudaError("ECUDA", "<what> failed: ...") unless rc is CUDA_SUCCESS.
void CuCheck(const CudaDriver& d, CUresult rc, const char* what);

// One counter as torch's memory_stats() reports it.
struct Stat {
  int64_t current = 0, peak = 0, allocated = 0, freed = 0;
  void Add(int64_t n) {
    current += n;
    if (n > 0) allocated += n;
    else freed -= n;
    if (current > peak) peak = current;
  }
};

// Each counter for all pools [0], the small pool [1] and the large pool [2].
struct AllocatorStats {
  Stat allocation[3], segment[3], active[3];
  Stat allocated_bytes[3], reserved_bytes[3], active_bytes[3], requested_bytes[3];
  int64_t num_alloc_retries = 0, num_ooms = 0, num_device_alloc = 0, num_device_free = 0;
};

struct Block;
struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const;  // (stream, size, address)
};
using BlockPool = std::set<Block*, BlockOrder>;

struct Block {
  CUstream stream = nullptr;
  size_t size = 0;
  size_t requested = 0;
  CUdeviceptr ptr = 0;
  bool allocated = false;
  bool small = false;
  int pending_events = 0;            // events still to complete before reuse
  Block* prev = nullptr;             // neighbours within the segment
  Block* next = nullptr;
  std::unordered_set<CUstream> uses;  // streams other than `stream` it was used on
};

// One block as memorySnapshot() lists it.
struct BlockInfo {
  size_t size, requested;
  const char* state;  // "active_allocated", "inactive", "active_pending_free"
};
struct SegmentInfo {
  CUdeviceptr address;
  size_t size;
  CUstream stream;
  bool small;
  std::vector<BlockInfo> blocks;
};

class CachingAllocator {
 public:
  CachingAllocator(const CudaDriver& d, int device) : d_(d), device_(device) {}
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // `size` bytes usable by work on `stream`; throws CudaError (EOOM, ECUDA).
  CUdeviceptr Malloc(size_t size, CUstream stream);
  // Returns the block of `ptr` (as Malloc returned it) to the cache.
  void Free(CUdeviceptr ptr);
  // Marks the block of `ptr` as used on `stream` too (torch's Tensor.record_stream).
  void RecordStream(CUdeviceptr ptr, CUstream stream);
  // Waits for pending events and frees every cached segment with nothing in use.
  void EmptyCache();
  // Drops every cached block for `stream` (before the stream is destroyed): waits
  // for its pending events and frees its unused segments.
  void ReleaseStream(CUstream stream);

  const AllocatorStats& stats() const { return stats_; }
  void ResetPeakStats();
  void ResetAccumulatedStats();
  std::vector<SegmentInfo> Snapshot() const;
  size_t BlockSizeOf(CUdeviceptr ptr) const;

 private:
  static size_t RoundSize(size_t size);
  static size_t SegmentSize(size_t rounded);
  BlockPool& PoolOf(bool small) { return small ? small_ : large_; }
  Block* FindFree(size_t rounded, CUstream stream, bool small);
  Block* NewSegment(size_t seg_size, CUstream stream, bool small, CUresult* rc);
  void FreeBlock(Block* b);
  void ProcessEvents();
  void SyncEvents();
  void ReleaseCached(CUstream only, bool any_stream);
  CUevent TakeEvent();
  [[noreturn]] void ThrowOom(size_t size, size_t seg_size, CUresult rc);
  void Count(Stat (&s)[3], bool small, int64_t n) {
    s[0].Add(n);
    s[small ? 1 : 2].Add(n);
  }

  const CudaDriver& d_;
  int device_;
  BlockPool small_, large_;
  std::unordered_map<CUdeviceptr, Block*> active_;  // allocated blocks by address
  std::unordered_set<Block*> pending_;               // freed, waiting for events
  std::vector<std::pair<CUevent, Block*>> events_;   // outstanding, in record order
  std::vector<CUevent> spare_events_;
  AllocatorStats stats_;
};

}  // namespace gpu
}  // namespace tprpc
