// Bindings for CUDA memory (see cuda_memory.h): the caching allocator of each
// device (caching_allocator.h), streams, pinned host memory (host_allocator.h)
// and copies ordered on a stream; and the tracker of tensor storages' blocks (trackBlock, sweepBlocks,
// trackedBlocks: block_tracker.h), whose sweep hands the blocks of collected owners back here.
//
// Copies (stream 0n is the legacy default stream):
// 1. From or to pinned memory (a block of the host allocator): one async copy
//    on the stream; an event on the host block keeps it from reuse until the
//    copy ran. With `blocking` the stream is synchronized before returning.
// 2. From pageable memory to the device: chunks of 4 MiB go through two pinned
//    staging buffers in turn (memcpy into one while the other is copied), each
//    guarded by an event, so the call can return before the copy ran even when
//    not blocking: the source bytes are already staged.
// 3. From the device to pageable memory: the same two buffers, each chunk
//    copied out once its event completed; always blocking.
//
// Thread: JS thread (every function here), the device's context made current first.
#include "gpu/cuda_memory.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "errors.h"
#include "napi_bigint.h"
#include "gpu/block_tracker.h"
#include "gpu/caching_allocator.h"
#include "gpu/host_allocator.h"

namespace tprpc {
namespace gpu {
namespace {

constexpr size_t kStageBytes = size_t(4) << 20;

struct Staging {
  void* buf[2] = {nullptr, nullptr};
  CUevent ev[2] = {nullptr, nullptr};
  bool recorded[2] = {false, false};
};

std::vector<std::unique_ptr<CachingAllocator>> g_alloc;  // by device
std::vector<std::unique_ptr<Staging>> g_stage;           // by device
std::unique_ptr<HostAllocator> g_host;

int Dev(const Napi::Value& v) { return v.As<Napi::Number>().Int32Value(); }
size_t Size(const Napi::Value& v) { return static_cast<size_t>(v.As<Napi::Number>().Int64Value()); }
CUstream StreamOf(const Napi::Value& v) { return reinterpret_cast<CUstream>(static_cast<uintptr_t>(BigIntU64(v))); }
std::pair<uint8_t*, size_t> Bytes(const Napi::Value& v) {
  auto view = v.As<Napi::TypedArray>();
  return {static_cast<uint8_t*>(view.ArrayBuffer().Data()) + view.ByteOffset(), view.ByteLength()};
}

// Runs f, turning a CudaError into a NativeError with its code.
template <typename F>
auto Guard(Napi::Env env, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const CudaError& e) {
    ThrowNative(env, e.code, 0, e.what());
  }
}

CachingAllocator& AllocatorOf(Napi::Env env, int device) {
  const CudaDriver& d = MakeCurrent(env, device);
  if (g_alloc.size() <= static_cast<size_t>(device)) g_alloc.resize(device + 1);
  if (!g_alloc[device]) g_alloc[device] = std::make_unique<CachingAllocator>(d, device);
  return *g_alloc[device];
}

HostAllocator& Host(Napi::Env env) {
  const CudaDriver& d = MakeCurrent(env, 0);
  if (!g_host) g_host = std::make_unique<HostAllocator>(d);
  return *g_host;
}

Staging& StagingOf(Napi::Env env, int device) {
  HostAllocator& host = Host(env);
  const CudaDriver& d = MakeCurrent(env, device);
  if (g_stage.size() <= static_cast<size_t>(device)) g_stage.resize(device + 1);
  if (!g_stage[device]) {
    auto s = std::make_unique<Staging>();
    for (int k = 0; k < 2; ++k) {
      s->buf[k] = host.Alloc(kStageBytes);
      CuCheck(d, d.cuEventCreate(&s->ev[k], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    }
    g_stage[device] = std::move(s);
  }
  return *g_stage[device];
}

// cachingAlloc(device, bytes, stream) -> BigInt device pointer.
Napi::Value CachingAlloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CachingAllocator& a = AllocatorOf(env, Dev(info[0]));
  return Guard(env, [&] { return Napi::BigInt::New(env, static_cast<uint64_t>(a.Malloc(Size(info[1]), StreamOf(info[2])))); });
}

// cachingFree(device, ptr)
Napi::Value CachingFree(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CachingAllocator& a = AllocatorOf(env, Dev(info[0]));
  Guard(env, [&] { a.Free(static_cast<CUdeviceptr>(BigIntU64(info[1]))); });
  return env.Undefined();
}

// The block tracker's free (block_tracker.h): a block whose owner was collected back to its allocator.
void FreeTracked(Napi::Env env, int device, uint64_t ptr) {
  Guard(env, [&] { AllocatorOf(env, device).Free(static_cast<CUdeviceptr>(ptr)); });
}

// recordStream(device, ptr, stream)
Napi::Value RecordStream(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CachingAllocator& a = AllocatorOf(env, Dev(info[0]));
  Guard(env, [&] { a.RecordStream(static_cast<CUdeviceptr>(BigIntU64(info[1])), StreamOf(info[2])); });
  return env.Undefined();
}

// emptyCache(device): the device's unused segments and the unused pinned blocks go back to the driver.
Napi::Value EmptyCache(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CachingAllocator& a = AllocatorOf(env, Dev(info[0]));
  Guard(env, [&] {
    a.EmptyCache();
    if (g_host) g_host->EmptyCache();
  });
  return env.Undefined();
}

void PutStat(Napi::Env env, Napi::Object o, const std::string& name, const Stat (&s)[3]) {
  const char* pools[3] = {"all", "small_pool", "large_pool"};
  for (int p = 0; p < 3; ++p) {
    std::string k = name + "." + pools[p] + ".";
    o.Set(k + "current", Napi::Number::New(env, static_cast<double>(s[p].current)));
    o.Set(k + "peak", Napi::Number::New(env, static_cast<double>(s[p].peak)));
    o.Set(k + "allocated", Napi::Number::New(env, static_cast<double>(s[p].allocated)));
    o.Set(k + "freed", Napi::Number::New(env, static_cast<double>(s[p].freed)));
  }
}

// memoryStats(device) -> flat { "allocated_bytes.all.current": n, ... } as torch.cuda.memory_stats().
Napi::Value MemoryStats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const AllocatorStats& s = AllocatorOf(env, Dev(info[0])).stats();
  auto o = Napi::Object::New(env);
  PutStat(env, o, "allocation", s.allocation);
  PutStat(env, o, "segment", s.segment);
  PutStat(env, o, "active", s.active);
  PutStat(env, o, "allocated_bytes", s.allocated_bytes);
  PutStat(env, o, "reserved_bytes", s.reserved_bytes);
  PutStat(env, o, "active_bytes", s.active_bytes);
  PutStat(env, o, "requested_bytes", s.requested_bytes);
  o.Set("num_alloc_retries", Napi::Number::New(env, static_cast<double>(s.num_alloc_retries)));
  o.Set("num_ooms", Napi::Number::New(env, static_cast<double>(s.num_ooms)));
  o.Set("num_device_alloc", Napi::Number::New(env, static_cast<double>(s.num_device_alloc)));
  o.Set("num_device_free", Napi::Number::New(env, static_cast<double>(s.num_device_free)));
  return o;
}

// resetPeakMemoryStats(device) / resetAccumulatedMemoryStats(device)
Napi::Value ResetPeak(const Napi::CallbackInfo& info) {
  AllocatorOf(info.Env(), Dev(info[0])).ResetPeakStats();
  return info.Env().Undefined();
}
Napi::Value ResetAccumulated(const Napi::CallbackInfo& info) {
  AllocatorOf(info.Env(), Dev(info[0])).ResetAccumulatedStats();
  return info.Env().Undefined();
}

// memorySnapshot(device) -> [{ address, size, stream, pool, blocks: [{ size, requested, state }] }]
Napi::Value MemorySnapshot(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto segs = AllocatorOf(env, Dev(info[0])).Snapshot();
  auto arr = Napi::Array::New(env, segs.size());
  for (uint32_t i = 0; i < segs.size(); ++i) {
    auto o = Napi::Object::New(env);
    o.Set("address", Napi::BigInt::New(env, static_cast<uint64_t>(segs[i].address)));
    o.Set("size", Napi::Number::New(env, static_cast<double>(segs[i].size)));
    o.Set("stream", Napi::BigInt::New(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(segs[i].stream))));
    o.Set("pool", Napi::String::New(env, segs[i].small ? "small" : "large"));
    auto blocks = Napi::Array::New(env, segs[i].blocks.size());
    for (uint32_t j = 0; j < segs[i].blocks.size(); ++j) {
      auto b = Napi::Object::New(env);
      b.Set("size", Napi::Number::New(env, static_cast<double>(segs[i].blocks[j].size)));
      b.Set("requested", Napi::Number::New(env, static_cast<double>(segs[i].blocks[j].requested)));
      b.Set("state", Napi::String::New(env, segs[i].blocks[j].state));
      blocks.Set(j, b);
    }
    o.Set("blocks", blocks);
    arr.Set(i, o);
  }
  return arr;
}

// streamCreate(device) -> BigInt handle of a new non-blocking stream.
Napi::Value StreamCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]));
  CUstream s = nullptr;
  Guard(env, [&] { CuCheck(d, d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); });
  return Napi::BigInt::New(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(s)));
}

// streamDestroy(device, stream): waits for it, drops the allocator's unused blocks for it, destroys it.
Napi::Value StreamDestroy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CachingAllocator& a = AllocatorOf(env, Dev(info[0]));
  const CudaDriver& d = *Driver();
  CUstream s = StreamOf(info[1]);
  Guard(env, [&] {
    CuCheck(d, d.cuStreamSynchronize(s), "cuStreamSynchronize");
    a.ReleaseStream(s);
    CuCheck(d, d.cuStreamDestroy(s), "cuStreamDestroy");
  });
  return env.Undefined();
}

// streamSynchronize(device, stream)
Napi::Value StreamSynchronize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]));
  Guard(env, [&] { CuCheck(d, d.cuStreamSynchronize(StreamOf(info[1])), "cuStreamSynchronize"); });
  return env.Undefined();
}

// streamQuery(device, stream) -> true when all its work completed.
Napi::Value StreamQuery(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]));
  CUresult rc = d.cuStreamQuery(StreamOf(info[1]));
  if (rc == CUDA_ERROR_NOT_READY) return Napi::Boolean::New(env, false);
  Guard(env, [&] { CuCheck(d, rc, "cuStreamQuery"); });
  return Napi::Boolean::New(env, true);
}

// streamWaitStream(device, waiter, waitee): work queued on waiter from now on waits for waitee's so far.
Napi::Value StreamWaitStream(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]));
  Guard(env, [&] {
    CUevent ev = nullptr;
    CuCheck(d, d.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    CUresult rc = d.cuEventRecord(ev, StreamOf(info[2]));
    if (rc == CUDA_SUCCESS) rc = d.cuStreamWaitEvent(StreamOf(info[1]), ev, 0);
    d.cuEventDestroy(ev);  // NB: safe once the wait is queued; the driver frees it when done
    CuCheck(d, rc, "cuStreamWaitEvent");
  });
  return env.Undefined();
}

// deviceSynchronize(device): waits for all work on the device, as torch.cuda.synchronize.
Napi::Value DeviceSynchronize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]));
  Guard(env, [&] { CuCheck(d, d.cuCtxSynchronize(), "cuCtxSynchronize"); });
  return env.Undefined();
}

// hostAlloc(bytes) -> ArrayBuffer over pinned memory, returned to the pinned cache when collected.
Napi::Value HostAlloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HostAllocator& h = Host(env);
  size_t n = Size(info[0]);
  void* p = Guard(env, [&] { return h.Alloc(n); });
  return Napi::ArrayBuffer::New(env, p, n, [](Napi::Env, void* data) {
    if (g_host) g_host->Free(data);
  });
}

// isPinned(view) -> whether the view's bytes lie in pinned memory from hostAlloc.
Napi::Value IsPinned(const Napi::CallbackInfo& info) {
  auto [p, n] = Bytes(info[0]);
  return Napi::Boolean::New(info.Env(), g_host && n > 0 && g_host->Contains(p, n));
}

// hostMemoryStats() -> { allocated, reserved, peakAllocated, hostAllocs, hostFrees } of pinned memory.
Napi::Value HostStatsJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  HostStats s = g_host ? g_host->stats() : HostStats{};
  auto o = Napi::Object::New(env);
  o.Set("allocated", Napi::Number::New(env, static_cast<double>(s.allocated_bytes.current)));
  o.Set("peakAllocated", Napi::Number::New(env, static_cast<double>(s.allocated_bytes.peak)));
  o.Set("reserved", Napi::Number::New(env, static_cast<double>(s.reserved_bytes.current)));
  o.Set("hostAllocs", Napi::Number::New(env, static_cast<double>(s.num_host_alloc)));
  o.Set("hostFrees", Napi::Number::New(env, static_cast<double>(s.num_host_free)));
  return o;
}

// copyHtoDAsync(device, dst, dstOffset, src view, stream, blocking)
Napi::Value CopyHtoDAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int device = Dev(info[0]);
  const CudaDriver& d = MakeCurrent(env, device);
  CUdeviceptr dst = static_cast<CUdeviceptr>(BigIntU64(info[1]) + Size(info[2]));
  auto [src, n] = Bytes(info[3]);
  CUstream s = StreamOf(info[4]);
  const bool blocking = info[5].ToBoolean().Value();
  Guard(env, [&] {
    if (g_host && g_host->Contains(src, n)) {
      CuCheck(d, d.cuMemcpyHtoDAsync(dst, src, n, s), "cuMemcpyHtoDAsync");
      g_host->RecordUse(src, s);
    } else {
      Staging& st = StagingOf(env, device);
      for (size_t done = 0, k = 0; done < n; done += kStageBytes, k ^= 1) {
        const size_t chunk = std::min(kStageBytes, n - done);
        if (st.recorded[k]) CuCheck(d, d.cuEventSynchronize(st.ev[k]), "cuEventSynchronize");
        std::memcpy(st.buf[k], src + done, chunk);
        CuCheck(d, d.cuMemcpyHtoDAsync(dst + done, st.buf[k], chunk, s), "cuMemcpyHtoDAsync");
        CuCheck(d, d.cuEventRecord(st.ev[k], s), "cuEventRecord");
        st.recorded[k] = true;
      }
    }
    if (blocking) CuCheck(d, d.cuStreamSynchronize(s), "cuStreamSynchronize");
  });
  return env.Undefined();
}

// copyDtoHAsync(device, src, srcOffset, dst view, stream, blocking): blocking unless dst is pinned.
Napi::Value CopyDtoHAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int device = Dev(info[0]);
  const CudaDriver& d = MakeCurrent(env, device);
  CUdeviceptr src = static_cast<CUdeviceptr>(BigIntU64(info[1]) + Size(info[2]));
  auto [dst, n] = Bytes(info[3]);
  CUstream s = StreamOf(info[4]);
  const bool blocking = info[5].ToBoolean().Value();
  Guard(env, [&] {
    if (g_host && g_host->Contains(dst, n)) {
      CuCheck(d, d.cuMemcpyDtoHAsync(dst, src, n, s), "cuMemcpyDtoHAsync");
      g_host->RecordUse(dst, s);
      if (blocking) CuCheck(d, d.cuStreamSynchronize(s), "cuStreamSynchronize");
      return;
    }
    Staging& st = StagingOf(env, device);
    size_t pending[2] = {0, 0}, pending_len[2] = {0, 0};
    auto drain = [&](size_t k) {
      if (pending_len[k] == 0) return;
      CuCheck(d, d.cuEventSynchronize(st.ev[k]), "cuEventSynchronize");
      std::memcpy(dst + pending[k], st.buf[k], pending_len[k]);
      pending_len[k] = 0;
    };
    for (size_t done = 0, k = 0; done < n; done += kStageBytes, k ^= 1) {
      if (pending_len[k] != 0) drain(k);
      else if (st.recorded[k]) CuCheck(d, d.cuEventSynchronize(st.ev[k]), "cuEventSynchronize");
      const size_t chunk = std::min(kStageBytes, n - done);
      CuCheck(d, d.cuMemcpyDtoHAsync(st.buf[k], src + done, chunk, s), "cuMemcpyDtoHAsync");
      CuCheck(d, d.cuEventRecord(st.ev[k], s), "cuEventRecord");
      st.recorded[k] = true;
      pending[k] = done;
      pending_len[k] = chunk;
    }
    drain(0);
    drain(1);
  });
  return env.Undefined();
}

// memsetAsync(device, ptr, offset, byte, bytes, stream): fills bytes on the stream (zeroed storages).
Napi::Value MemsetAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]));
  CUdeviceptr dst = static_cast<CUdeviceptr>(BigIntU64(info[1]) + Size(info[2]));
  auto value = static_cast<unsigned char>(info[3].As<Napi::Number>().Uint32Value());
  Guard(env, [&] { CuCheck(d, d.cuMemsetD8Async(dst, value, Size(info[4]), StreamOf(info[5])), "cuMemsetD8Async"); });
  return env.Undefined();
}

// copyDtoDAsync(device, src, srcOffset, dst, dstOffset, bytes, stream, blocking): within one device.
Napi::Value CopyDtoDAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]));
  CUdeviceptr src = static_cast<CUdeviceptr>(BigIntU64(info[1]) + Size(info[2]));
  CUdeviceptr dst = static_cast<CUdeviceptr>(BigIntU64(info[3]) + Size(info[4]));
  CUstream s = StreamOf(info[6]);
  Guard(env, [&] {
    CuCheck(d, d.cuMemcpyDtoDAsync(dst, src, Size(info[5]), s), "cuMemcpyDtoDAsync");
    if (info[7].ToBoolean().Value()) CuCheck(d, d.cuStreamSynchronize(s), "cuStreamSynchronize");
  });
  return env.Undefined();
}

}  // namespace

void AddCudaMemory(Napi::Env env, Napi::Object ns) {
  const std::pair<const char*, Napi::Function::Callback> fns[] = {
      {"cachingAlloc", CachingAlloc},
      {"cachingFree", CachingFree},
      {"recordStream", RecordStream},
      {"emptyCache", EmptyCache},
      {"memoryStats", MemoryStats},
      {"resetPeakMemoryStats", ResetPeak},
      {"resetAccumulatedMemoryStats", ResetAccumulated},
      {"memorySnapshot", MemorySnapshot},
      {"streamCreate", StreamCreate},
      {"streamDestroy", StreamDestroy},
      {"streamSynchronize", StreamSynchronize},
      {"streamQuery", StreamQuery},
      {"streamWaitStream", StreamWaitStream},
      {"deviceSynchronize", DeviceSynchronize},
      {"hostAlloc", HostAlloc},
      {"isPinned", IsPinned},
      {"hostMemoryStats", HostStatsJs},
      {"copyHtoDAsync", CopyHtoDAsync},
      {"copyDtoHAsync", CopyDtoHAsync},
      {"copyDtoDAsync", CopyDtoDAsync},
      {"memsetAsync", MemsetAsync},
  };
  for (auto& [name, fn] : fns) ns.Set(name, Napi::Function::New(env, fn, name));
  AddBlockTracker(env, ns, FreeTracked);
}

}  // namespace gpu
}  // namespace tprpc
