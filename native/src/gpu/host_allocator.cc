// See host_allocator.h. Thread: JS thread only.
#include "gpu/host_allocator.h"

namespace tprpc {
namespace gpu {

namespace {
size_t RoundPow2(size_t n) {
  size_t r = 4096;
  while (r < n) r <<= 1;
  return r;
}
}  // namespace

HostAllocator::HostBlock* HostAllocator::Find(const void* ptr) const {
  auto p = reinterpret_cast<uintptr_t>(ptr);
  auto it = blocks_.upper_bound(p);
  if (it == blocks_.begin()) return nullptr;
  --it;
  HostBlock* b = it->second;
  return p < it->first + b->size ? b : nullptr;
}

// True when every event recorded on the block completed (they are then recycled).
bool HostAllocator::Ready(HostBlock* b) {
  while (!b->events.empty()) {
    CUresult rc = d_.cuEventQuery(b->events.back());
    if (rc == CUDA_ERROR_NOT_READY) return false;
    CuCheck(d_, rc, "cuEventQuery");
    spare_events_.push_back(b->events.back());
    b->events.pop_back();
  }
  return true;
}

void* HostAllocator::Alloc(size_t size) {
  const size_t rounded = RoundPow2(size);
  for (auto it = free_.lower_bound(rounded); it != free_.end() && it->first == rounded; ++it) {
    HostBlock* b = it->second;
    if (!Ready(b)) continue;
    free_.erase(it);
    b->in_use = true;
    stats_.allocated_bytes.Add(static_cast<int64_t>(b->size));
    return b->ptr;
  }
  void* p = nullptr;
  CUresult rc = d_.cuMemHostAlloc(&p, rounded, CU_MEMHOSTALLOC_PORTABLE);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
    EmptyCache();
    rc = d_.cuMemHostAlloc(&p, rounded, CU_MEMHOSTALLOC_PORTABLE);
  }
  if (rc == CUDA_ERROR_OUT_OF_MEMORY)
    throw CudaError("EOOM", "out of pinned host memory: cuMemHostAlloc of " + std::to_string(rounded) +
                                " bytes failed (" + CuErrorText(d_, rc) + ") after returning the cached blocks");
  CuCheck(d_, rc, "cuMemHostAlloc");
  stats_.num_host_alloc++;
  auto* b = new HostBlock();
  b->ptr = p;
  b->size = rounded;
  b->in_use = true;
  blocks_[reinterpret_cast<uintptr_t>(p)] = b;
  stats_.reserved_bytes.Add(static_cast<int64_t>(rounded));
  stats_.allocated_bytes.Add(static_cast<int64_t>(rounded));
  return p;
}

void HostAllocator::Free(void* ptr) {
  HostBlock* b = Find(ptr);
  if (b == nullptr || b->ptr != ptr || !b->in_use) return;  // NB: called from finalizers: never throws
  b->in_use = false;
  stats_.allocated_bytes.Add(-static_cast<int64_t>(b->size));
  free_.emplace(b->size, b);
}

void HostAllocator::RecordUse(const void* ptr, CUstream stream) {
  HostBlock* b = Find(ptr);
  if (b == nullptr) return;
  CUevent ev = nullptr;
  if (!spare_events_.empty()) {
    ev = spare_events_.back();
    spare_events_.pop_back();
  } else {
    CuCheck(d_, d_.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  }
  CuCheck(d_, d_.cuEventRecord(ev, stream), "cuEventRecord");
  b->events.push_back(ev);
}

bool HostAllocator::Contains(const void* ptr, size_t bytes) const {
  HostBlock* b = Find(ptr);
  return b != nullptr && b->in_use &&
         reinterpret_cast<uintptr_t>(ptr) + bytes <= reinterpret_cast<uintptr_t>(b->ptr) + b->size;
}

void HostAllocator::EmptyCache() {
  for (auto it = free_.begin(); it != free_.end();) {
    HostBlock* b = it->second;
    for (CUevent ev : b->events) d_.cuEventSynchronize(ev);
    Ready(b);
    CuCheck(d_, d_.cuMemFreeHost(b->ptr), "cuMemFreeHost");
    stats_.num_host_free++;
    stats_.reserved_bytes.Add(-static_cast<int64_t>(b->size));
    blocks_.erase(reinterpret_cast<uintptr_t>(b->ptr));
    delete b;
    it = free_.erase(it);
  }
}

}  // namespace gpu
}  // namespace tprpc
