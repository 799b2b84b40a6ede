// See memory.h. JS API (all on the JS thread):
//   alloc(byteLength, { shared?, prefault?, zero? = true }) -> ArrayBuffer
//   poolStats() -> { cachedBytes, liveBytes, allocations, reuses, limitBytes, cachedBlocks, liveBlocks }
//   trimPool() -> bytes released;  setPoolLimit(bytes) -> previous limit
//   sharedMemory(buf) -> { fd, byteLength, path } | null;  addressOf(buf) -> number (debugging, tests)
#include "memory.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "errors.h"

namespace tprpc {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kHeapMax = 64 << 10;   // below: posix_memalign; from here: mmap (pages, so 64-aligned)
constexpr size_t kHugeMin = 2 << 20;    // private blocks from here ask for transparent huge pages
constexpr size_t kPage = 4096;
constexpr double kMaxBytes = 1ull << 46;

enum class Kind : uint8_t { Heap, Map, Shared };

struct Block {
  void* ptr = nullptr;
  size_t capacity = 0;
  Kind kind = Kind::Heap;
  int fd = -1;
};

// Size classes: 4 per power of two (at most 25% slack), multiples of 64 bytes.
size_t ClassSize(size_t n) {
  if (n <= kAlign) return kAlign;
  int k = 63 - __builtin_clzll(static_cast<unsigned long long>(n - 1));  // 2^k < n <= 2^(k+1)
  size_t step = (size_t{1} << k) / 4;
  if (step < kAlign) step = kAlign;
  return (n + step - 1) / step * step;
}

void Touch(void* p, size_t bytes) {
  volatile char* c = static_cast<volatile char*>(p);
  for (size_t i = 0; i < bytes; i += kPage) c[i] = 0;
}

void FreeBlock(const Block& b) {
  if (b.kind == Kind::Heap) {
    std::free(b.ptr);
    return;
  }
  munmap(b.ptr, b.capacity);
  if (b.fd >= 0) close(b.fd);
}

size_t LimitFromEnv() {
  const char* v = std::getenv("TPRPC_POOL_BYTES");
  if (v != nullptr && *v != '\0') {
    char* end = nullptr;
    unsigned long long n = std::strtoull(v, &end, 10);
    if (end != nullptr && *end == '\0') return static_cast<size_t>(n);
  }
  // NB: a cache that cannot hold one 400 MB receive buffer maps (and page-faults, ~1.6 GB/s) every
  // large tensor afresh; 1/16 of RAM, between 256 MiB and 2 GiB, keeps a few large blocks warm.
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  size_t ram = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
  return std::clamp(ram / 16, size_t{256} << 20, size_t{2} << 30);
}

class Pool {
 public:
  // Returns a block of class ClassSize(bytes); throws (JS) on failure. *mapped: the bytes newly mapped
  // for it (0 when a cached block was reused).
  Block Acquire(Napi::Env env, size_t bytes, bool shared, bool prefault, bool zero, size_t* mapped) {
    size_t cap = ClassSize(bytes);
    Kind kind = shared ? Kind::Shared : (cap < kHeapMax ? Kind::Heap : Kind::Map);
    Block b;
    bool reused = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = index_.find(Key(cap, kind));
      if (it != index_.end()) {
        b = *it->second;
        cached_bytes_ -= b.capacity;
        cache_.erase(it->second);
        index_.erase(it);
        reused = true;
        ++reuses_;
      }
    }
    if (reused) {
      if (zero) std::memset(b.ptr, 0, bytes);
      else if (prefault && kind != Kind::Heap) Touch(b.ptr, cap);
    } else {
      b = Map(env, cap, kind, prefault);
      if (zero && kind == Kind::Heap) std::memset(b.ptr, 0, bytes);  // NB: fresh mappings are zero already
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!reused) ++allocations_;
    *mapped = reused ? 0 : b.capacity;
    live_[b.ptr] = b;
    live_bytes_ += b.capacity;
    return b;
  }

  // Back to the free list, or unmapped when the cache is full. Returns the bytes unmapped.
  size_t Release(void* ptr) {
    std::vector<Block> victims;
    size_t cap = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = live_.find(ptr);
      if (it == live_.end()) return 0;
      Block b = it->second;
      live_.erase(it);
      live_bytes_ -= b.capacity;
      cap = b.capacity;
      if (b.capacity > limit_) {
        victims.push_back(b);
      } else {
        EvictLocked(limit_ - b.capacity, victims);
        cache_.push_back(b);
        index_.emplace(Key(b.capacity, b.kind), std::prev(cache_.end()));
        cached_bytes_ += b.capacity;
      }
    }
    size_t freed = 0;
    for (auto& v : victims) {
      freed += v.capacity;
      FreeBlock(v);
    }
    (void)cap;
    return freed;
  }

  size_t Trim(size_t keep) {
    std::vector<Block> victims;
    {
      std::lock_guard<std::mutex> lock(mu_);
      EvictLocked(keep, victims);
    }
    size_t n = 0;
    for (auto& v : victims) {
      n += v.capacity;
      FreeBlock(v);
    }
    return n;
  }

  size_t SetLimit(size_t limit, size_t* freed) {
    size_t old;
    {
      std::lock_guard<std::mutex> lock(mu_);
      old = limit_;
      limit_ = limit;
    }
    *freed = Trim(limit);
    return old;
  }

  bool Lookup(const void* ptr, Block* out) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(const_cast<void*>(ptr));
    if (it == live_.end()) return false;
    *out = it->second;
    return true;
  }

  Napi::Object Stats(Napi::Env env) {
    std::lock_guard<std::mutex> lock(mu_);
    auto o = Napi::Object::New(env);
    o.Set("cachedBytes", Napi::Number::New(env, static_cast<double>(cached_bytes_)));
    o.Set("liveBytes", Napi::Number::New(env, static_cast<double>(live_bytes_)));
    o.Set("allocations", Napi::Number::New(env, static_cast<double>(allocations_)));
    o.Set("reuses", Napi::Number::New(env, static_cast<double>(reuses_)));
    o.Set("limitBytes", Napi::Number::New(env, static_cast<double>(limit_)));
    o.Set("cachedBlocks", Napi::Number::New(env, static_cast<double>(cache_.size())));
    o.Set("liveBlocks", Napi::Number::New(env, static_cast<double>(live_.size())));
    return o;
  }

 private:
  static size_t Key(size_t cap, Kind kind) { return cap * 4 + static_cast<size_t>(kind); }

  // Drops the oldest cached blocks until at most `keep` bytes stay cached.
  void EvictLocked(size_t keep, std::vector<Block>& victims) {
    while (cached_bytes_ > keep && !cache_.empty()) {
      Block b = cache_.front();
      auto range = index_.equal_range(Key(b.capacity, b.kind));
      for (auto it = range.first; it != range.second; ++it) {
        if (it->second == cache_.begin()) {
          index_.erase(it);
          break;
        }
      }
      cache_.pop_front();
      cached_bytes_ -= b.capacity;
      victims.push_back(b);
    }
  }

  // A new block from the OS. NB: no lock held; mapping (and pre-faulting) can take a while.
  static Block Map(Napi::Env env, size_t cap, Kind kind, bool prefault) {
    Block b;
    b.capacity = cap;
    b.kind = kind;
    if (kind == Kind::Heap) {
      if (posix_memalign(&b.ptr, kAlign, cap) != 0)
        ThrowNative(env, "ENOMEM", ENOMEM, "could not allocate " + std::to_string(cap) + " bytes for a tensor storage");
      return b;
    }
    if (kind == Kind::Shared) {
      b.fd = memfd_create("tprpc-storage", MFD_CLOEXEC);
      if (b.fd < 0) ThrowNative(env, "EMFD", errno, "memfd_create failed for a shared tensor storage");
      if (ftruncate(b.fd, static_cast<off_t>(cap)) != 0) {
        int err = errno;
        close(b.fd);
        ThrowNative(env, err == ENOMEM || err == ENOSPC ? "ENOMEM" : "EMFD", err,
                    "could not size a shared storage to " + std::to_string(cap) +
                        " bytes; /dev/shm or the memory limit may be too small");
      }
      void* p = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_SHARED | (prefault ? MAP_POPULATE : 0), b.fd, 0);
      if (p == MAP_FAILED) {
        int err = errno;
        close(b.fd);
        ThrowNative(env, err == ENOMEM ? "ENOMEM" : "EMMAP", err,
                    "could not map a shared storage of " + std::to_string(cap) + " bytes");
      }
      b.ptr = p;
      return b;
    }
    bool huge = cap >= kHugeMin;
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | (prefault && !huge ? MAP_POPULATE : 0);
    void* p = mmap(nullptr, cap, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p == MAP_FAILED)
      ThrowNative(env, errno == ENOMEM ? "ENOMEM" : "EMMAP", errno,
                  "could not map " + std::to_string(cap) + " bytes for a tensor storage");
    // NB: huge pages cut TLB misses in matmul; asked before the first touch so the fault can use them.
    if (huge) madvise(p, cap, MADV_HUGEPAGE);
    if (prefault && huge) Touch(p, cap);
    b.ptr = p;
    return b;
  }

  std::mutex mu_;
  std::list<Block> cache_;                                    // oldest first
  std::multimap<size_t, std::list<Block>::iterator> index_;   // Key(capacity, kind) -> cache entry
  std::unordered_map<void*, Block> live_;
  size_t cached_bytes_ = 0, live_bytes_ = 0, allocations_ = 0, reuses_ = 0;
  size_t limit_ = LimitFromEnv();
};

Pool& ThePool() {
  static Pool* pool = new Pool();  // NB: never destroyed: finalizers may run during process teardown.
  return *pool;
}

bool OptBool(const Napi::Object& o, const char* key, bool dflt) {
  Napi::Value v = o.Get(key);
  return v.IsUndefined() ? dflt : v.ToBoolean().Value();
}

// NB: V8 is told the pool's footprint (live + cached blocks), not each block's lifetime: a storage
// recycled through the cache changes nothing, so a steady stream of received tensors (RPC) does not
// look like ever-growing external memory and set off a mark-compact every few messages (~4 ms per
// 4 MB round trip, measured). New mappings still count, so garbage storages still drive GCs.
void Finalize(Napi::Env env, void* data) {
  size_t freed = ThePool().Release(data);
  if (freed != 0) Napi::MemoryManagement::AdjustExternalMemory(env, -static_cast<int64_t>(freed));
}

Napi::Value Alloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsNumber()) throw Napi::TypeError::New(env, "alloc(byteLength, options?): byteLength must be a number");
  double n = info[0].As<Napi::Number>().DoubleValue();
  if (!(n >= 0) || n != static_cast<double>(static_cast<uint64_t>(n)) || n > kMaxBytes)
    throw Napi::RangeError::New(env, "alloc: byteLength must be a non-negative integer below 2^46");
  bool shared = false, prefault = false, zero = true;
  if (info.Length() > 1 && info[1].IsObject()) {
    auto o = info[1].As<Napi::Object>();
    shared = OptBool(o, "shared", false);
    prefault = OptBool(o, "prefault", false);
    zero = OptBool(o, "zero", true);
  }
  size_t bytes = static_cast<size_t>(n);
  size_t mapped = 0;
  Block b = ThePool().Acquire(env, bytes, shared, prefault, zero, &mapped);
  if (mapped != 0) Napi::MemoryManagement::AdjustExternalMemory(env, static_cast<int64_t>(mapped));
  // NB: Node implements external ArrayBuffers with external Buffers, so the finalizer
  // runs on the JS thread, in a setImmediate after the GC that collected the buffer.
  return Napi::ArrayBuffer::New(env, b.ptr, bytes, Finalize);
}

void* DataOf(const Napi::Value& v, const char* fn) {
  if (v.IsArrayBuffer()) return v.As<Napi::ArrayBuffer>().Data();
  if (v.IsTypedArray()) {
    auto ta = v.As<Napi::TypedArray>();
    return static_cast<char*>(ta.ArrayBuffer().Data()) + ta.ByteOffset();
  }
  throw Napi::TypeError::New(v.Env(), std::string(fn) + ": expected an ArrayBuffer or a TypedArray");
}

Napi::Value PoolStats(const Napi::CallbackInfo& info) { return ThePool().Stats(info.Env()); }

Napi::Value TrimPool(const Napi::CallbackInfo& info) {
  size_t freed = ThePool().Trim(0);
  if (freed != 0) Napi::MemoryManagement::AdjustExternalMemory(info.Env(), -static_cast<int64_t>(freed));
  return Napi::Number::New(info.Env(), static_cast<double>(freed));
}

Napi::Value SetPoolLimit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  double n = info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : -1;
  if (!(n >= 0) || n > kMaxBytes) throw Napi::RangeError::New(env, "setPoolLimit(bytes): bytes must be >= 0");
  size_t freed = 0;
  size_t old = ThePool().SetLimit(static_cast<size_t>(n), &freed);
  if (freed != 0) Napi::MemoryManagement::AdjustExternalMemory(env, -static_cast<int64_t>(freed));
  return Napi::Number::New(env, static_cast<double>(old));
}

Napi::Value SharedMemory(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Block b;
  if (!ThePool().Lookup(DataOf(info[0], "sharedMemory"), &b) || b.kind != Kind::Shared) return env.Null();
  auto o = Napi::Object::New(env);
  o.Set("fd", Napi::Number::New(env, b.fd));
  o.Set("byteLength", Napi::Number::New(env, static_cast<double>(b.capacity)));
  o.Set("path", Napi::String::New(env, "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(b.fd)));
  return o;
}

Napi::Value AddressOf(const Napi::CallbackInfo& info) {
  auto addr = reinterpret_cast<uintptr_t>(DataOf(info[0], "addressOf"));
  return Napi::Number::New(info.Env(), static_cast<double>(addr));  // NB: user addresses < 2^47, exact in a double
}

// detachBuffer(buffer): detaches the ArrayBuffer (of a TypedArray: its buffer); true when it was detachable.
// Every view of it reads as empty from then on, and what backs it is released now, not at the collection that
// would free it: Node runs an external buffer's finalizer at its next immediate (an shm landing block goes back
// to the peer, a pool block to the pool; sdk/distributed/p2p.ts), V8 frees its own buffers at once.
Napi::Value DetachBuffer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Value v = info[0];
  Napi::ArrayBuffer ab;
  if (v.IsArrayBuffer()) ab = v.As<Napi::ArrayBuffer>();
  else if (v.IsTypedArray()) ab = v.As<Napi::TypedArray>().ArrayBuffer();
  else throw Napi::TypeError::New(env, "detachBuffer: expected an ArrayBuffer or a TypedArray");
  if (ab.IsDetached()) return Napi::Boolean::New(env, false);
  // NB: the C call, not node-addon-api's Detach(), which throws on a buffer V8 will not detach (a wasm memory)
  bool detachable = napi_detach_arraybuffer(env, ab) == napi_ok;
  return Napi::Boolean::New(env, detachable);
}

}  // namespace

bool LookupShared(const void* data, SharedBlock* out) {
  Block b;
  if (!ThePool().Lookup(data, &b) || b.kind != Kind::Shared) return false;
  out->fd = b.fd;
  out->capacity = b.capacity;
  return true;
}

void RegisterMemory(Napi::Env env, Napi::Object exports) {
  exports.Set("alloc", Napi::Function::New(env, Alloc));
  exports.Set("poolStats", Napi::Function::New(env, PoolStats));
  exports.Set("trimPool", Napi::Function::New(env, TrimPool));
  exports.Set("setPoolLimit", Napi::Function::New(env, SetPoolLimit));
  exports.Set("sharedMemory", Napi::Function::New(env, SharedMemory));
  exports.Set("addressOf", Napi::Function::New(env, AddressOf));
  exports.Set("detachBuffer", Napi::Function::New(env, DetachBuffer));
}

}  // namespace tprpc
