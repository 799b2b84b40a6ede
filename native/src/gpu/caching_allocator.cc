// See caching_allocator.h for the rules; this file follows them step by step.
// Thread: JS thread only, the device's context current.
#include "gpu/caching_allocator.h"

#include <algorithm>
#include <cstdio>

namespace tprpc {
namespace gpu {

std::string CuErrorText(const CudaDriver& d, CUresult rc) {
  const char* name = nullptr;
  if (d.cuGetErrorName(rc, &name) != CUDA_SUCCESS || name == nullptr) name = "CUDA_ERROR_UNKNOWN";
  return std::string(name) + " (" + std::to_string(rc) + ")";
}

void CuCheck(const CudaDriver& d, CUresult rc, const char* what) {
  if (rc != CUDA_SUCCESS) throw CudaError("ECUDA", std::string(what) + " failed: " + CuErrorText(d, rc));
}

bool BlockOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return reinterpret_cast<uintptr_t>(a->stream) < reinterpret_cast<uintptr_t>(b->stream);
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}

size_t CachingAllocator::RoundSize(size_t size) {
  if (size < kMinBlockSize) return kMinBlockSize;
  return (size + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t CachingAllocator::SegmentSize(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

// The smallest free block of at least `rounded` bytes for `stream` (lowest address on ties).
Block* CachingAllocator::FindFree(size_t rounded, CUstream stream, bool small) {
  BlockPool& pool = PoolOf(small);
  Block key;
  key.stream = stream;
  key.size = rounded;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

Block* CachingAllocator::NewSegment(size_t seg_size, CUstream stream, bool small, CUresult* rc) {
  CUdeviceptr p = 0;
  *rc = d_.cuMemAlloc(&p, seg_size);
  if (*rc != CUDA_SUCCESS) return nullptr;
  stats_.num_device_alloc++;
  auto* b = new Block();
  b->stream = stream;
  b->size = seg_size;
  b->ptr = p;
  b->small = small;
  Count(stats_.segment, small, 1);
  Count(stats_.reserved_bytes, small, static_cast<int64_t>(seg_size));
  return b;
}

CUdeviceptr CachingAllocator::Malloc(size_t size, CUstream stream) {
  ProcessEvents();
  const size_t rounded = RoundSize(size);
  const bool small = rounded <= kSmallSize;
  const size_t seg_size = SegmentSize(rounded);
  Block* b = FindFree(rounded, stream, small);
  CUresult rc = CUDA_SUCCESS;
  if (b == nullptr) b = NewSegment(seg_size, stream, small, &rc);
  if (b == nullptr && rc == CUDA_ERROR_OUT_OF_MEMORY) {
    // Step 5: what is cached but unused goes back to the driver, then one more try.
    stats_.num_alloc_retries++;
    SyncEvents();
    b = FindFree(rounded, stream, small);
    if (b == nullptr) {
      ReleaseCached(nullptr, true);
      b = NewSegment(seg_size, stream, small, &rc);
    }
  }
  if (b == nullptr) {
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) ThrowOom(size, seg_size, rc);
    CuCheck(d_, rc, "cuMemAlloc");
  }
  // Step 3: split off the rest when it is worth keeping.
  const size_t rest = b->size - rounded;
  if (small ? rest >= kMinBlockSize : rest > kSmallSize) {
    auto* r = new Block();
    r->stream = stream;
    r->size = rest;
    r->ptr = b->ptr + rounded;
    r->small = small;
    r->prev = b;
    r->next = b->next;
    if (r->next) r->next->prev = r;
    b->next = r;
    b->size = rounded;
    PoolOf(small).insert(r);
  }
  b->allocated = true;
  b->requested = size;
  active_[b->ptr] = b;
  Count(stats_.allocation, small, 1);
  Count(stats_.allocated_bytes, small, static_cast<int64_t>(b->size));
  Count(stats_.requested_bytes, small, static_cast<int64_t>(size));
  Count(stats_.active, small, 1);
  Count(stats_.active_bytes, small, static_cast<int64_t>(b->size));
  return b->ptr;
}

void CachingAllocator::Free(CUdeviceptr ptr) {
  auto it = active_.find(ptr);
  if (it == active_.end())
    throw CudaError("EINVAL", "free of a pointer the caching allocator of cuda:" + std::to_string(device_) +
                                  " did not hand out (or freed twice)");
  Block* b = it->second;
  active_.erase(it);
  b->allocated = false;
  Count(stats_.allocation, b->small, -1);
  Count(stats_.allocated_bytes, b->small, -static_cast<int64_t>(b->size));
  Count(stats_.requested_bytes, b->small, -static_cast<int64_t>(b->requested));
  if (b->uses.empty()) return FreeBlock(b);
  // Step 4: reusable once the work queued so far on every other stream has run.
  for (CUstream s : b->uses) {
    CUevent ev = TakeEvent();
    CuCheck(d_, d_.cuEventRecord(ev, s), "cuEventRecord");
    b->pending_events++;
    events_.emplace_back(ev, b);
  }
  b->uses.clear();
  pending_.insert(b);
}

void CachingAllocator::RecordStream(CUdeviceptr ptr, CUstream stream) {
  auto it = active_.find(ptr);
  if (it == active_.end())
    throw CudaError("EINVAL", "recordStream on memory the caching allocator of cuda:" + std::to_string(device_) +
                                  " does not hold");
  if (stream != it->second->stream) it->second->uses.insert(stream);
}

// Back into its pool, merged with free neighbours (step 3).
void CachingAllocator::FreeBlock(Block* b) {
  BlockPool& pool = PoolOf(b->small);
  Count(stats_.active, b->small, -1);
  Count(stats_.active_bytes, b->small, -static_cast<int64_t>(b->size));
  auto mergeable = [](const Block* n) { return n != nullptr && !n->allocated && n->pending_events == 0; };
  if (mergeable(b->prev)) {
    Block* p = b->prev;
    pool.erase(p);
    b->ptr = p->ptr;
    b->size += p->size;
    b->prev = p->prev;
    if (b->prev) b->prev->next = b;
    delete p;
  }
  if (mergeable(b->next)) {
    Block* n = b->next;
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (b->next) b->next->prev = b;
    delete n;
  }
  pool.insert(b);
}

CUevent CachingAllocator::TakeEvent() {
  if (!spare_events_.empty()) {
    CUevent ev = spare_events_.back();
    spare_events_.pop_back();
    return ev;
  }
  CUevent ev = nullptr;
  CuCheck(d_, d_.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  return ev;
}

// Returns the blocks whose events all completed to their pools.
void CachingAllocator::ProcessEvents() {
  size_t kept = 0;
  for (size_t i = 0; i < events_.size(); ++i) {
    auto [ev, b] = events_[i];
    CUresult rc = d_.cuEventQuery(ev);
    if (rc == CUDA_ERROR_NOT_READY) {
      events_[kept++] = events_[i];
      continue;
    }
    CuCheck(d_, rc, "cuEventQuery");
    spare_events_.push_back(ev);
    if (--b->pending_events == 0) {
      pending_.erase(b);
      FreeBlock(b);
    }
  }
  events_.resize(kept);
}

void CachingAllocator::SyncEvents() {
  for (auto& e : events_) CuCheck(d_, d_.cuEventSynchronize(e.first), "cuEventSynchronize");
  ProcessEvents();
}

// Frees the whole-segment free blocks of `only` (or of every stream with any_stream).
void CachingAllocator::ReleaseCached(CUstream only, bool any_stream) {
  for (BlockPool* pool : {&small_, &large_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev != nullptr || b->next != nullptr || (!any_stream && b->stream != only)) {
        ++it;
        continue;
      }
      CuCheck(d_, d_.cuMemFree(b->ptr), "cuMemFree");
      stats_.num_device_free++;
      Count(stats_.segment, b->small, -1);
      Count(stats_.reserved_bytes, b->small, -static_cast<int64_t>(b->size));
      it = pool->erase(it);
      delete b;
    }
  }
}

void CachingAllocator::EmptyCache() {
  SyncEvents();
  ReleaseCached(nullptr, true);
}

void CachingAllocator::ReleaseStream(CUstream stream) {
  SyncEvents();
  ReleaseCached(stream, false);
}

void CachingAllocator::ThrowOom(size_t size, size_t seg_size, CUresult rc) {
  stats_.num_ooms++;
  size_t free_b = 0, total = 0;
  d_.cuMemGetInfo(&free_b, &total);
  auto mib = [](double b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1 << 20));
    return std::string(buf);
  };
  const double allocated = static_cast<double>(stats_.allocated_bytes[0].current);
  const double reserved = static_cast<double>(stats_.reserved_bytes[0].current);
  throw CudaError("EOOM", "CUDA out of memory. Tried to allocate " + mib(static_cast<double>(size)) + " (a " +
                              mib(static_cast<double>(seg_size)) + " segment; " + CuErrorText(d_, rc) + "). cuda:" +
                              std::to_string(device_) + " has a total capacity of " + mib(static_cast<double>(total)) +
                              " of which " + mib(static_cast<double>(free_b)) + " is free. " + mib(allocated) +
                              " is allocated by tensors and " + mib(reserved - allocated) +
                              " is reserved by tprpc but unallocated (already returned to the driver once, then "
                              "retried). Free tensors you no longer need, or use smaller batches.");
}

void CachingAllocator::ResetPeakStats() {
  for (auto* group : {&stats_.allocation, &stats_.segment, &stats_.active, &stats_.allocated_bytes,
                      &stats_.reserved_bytes, &stats_.active_bytes, &stats_.requested_bytes})
    for (Stat& s : *group) s.peak = s.current;
}

void CachingAllocator::ResetAccumulatedStats() {
  for (auto* group : {&stats_.allocation, &stats_.segment, &stats_.active, &stats_.allocated_bytes,
                      &stats_.reserved_bytes, &stats_.active_bytes, &stats_.requested_bytes})
    for (Stat& s : *group) s.allocated = s.freed = 0;
  stats_.num_alloc_retries = stats_.num_ooms = stats_.num_device_alloc = stats_.num_device_free = 0;
}

std::vector<SegmentInfo> CachingAllocator::Snapshot() const {
  std::vector<const Block*> heads;
  auto consider = [&](const Block* b) {
    while (b->prev) b = b->prev;
    heads.push_back(b);
  };
  for (const BlockPool* pool : {&small_, &large_})
    for (const Block* b : *pool) consider(b);
  for (auto& kv : active_) consider(kv.second);
  for (const Block* b : pending_) consider(b);
  std::sort(heads.begin(), heads.end(), [](const Block* a, const Block* b) { return a->ptr < b->ptr; });
  heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
  std::vector<SegmentInfo> out;
  for (const Block* h : heads) {
    SegmentInfo seg{h->ptr, 0, h->stream, h->small, {}};
    for (const Block* b = h; b; b = b->next) {
      seg.size += b->size;
      const char* state = b->allocated ? "active_allocated" : b->pending_events > 0 ? "active_pending_free" : "inactive";
      seg.blocks.push_back({b->size, b->allocated ? b->requested : 0, state});
    }
    out.push_back(std::move(seg));
  }
  return out;
}

size_t CachingAllocator::BlockSizeOf(CUdeviceptr ptr) const {
  auto it = active_.find(ptr);
  return it == active_.end() ? 0 : it->second->size;
}

}  // namespace gpu
}  // namespace tprpc
