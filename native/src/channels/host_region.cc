// Host regions: shared-memory buffers that the processes of a collective on one host map together,
// and the reduction kernel that reads them (sdk/distributed/host_shm.ts runs the algorithm).
//
//  1. hostRegionCreate(bytes): a memfd of `bytes`, mapped MAP_SHARED (populated) as an ArrayBuffer;
//     {buffer, pid, fd}. The descriptor stays open while the buffer lives, so that a peer can map
//     the same file through /proc/<pid>/fd/<fd> (same uid; no name in /dev/shm, nothing leaks when
//     a process dies).
//  2. hostRegionOpen(pid, fd, bytes): maps a peer's region (MAP_SHARED, read-write) as an
//     ArrayBuffer; NativeError EREGION when the file cannot be opened or is shorter than `bytes`
//     (another host, another uid, the peer gone). The caller checks a token in the region to be
//     sure it is the peer's file and not a stranger's (a reused pid).
//  3. reduceN(op, out, inputs): out[i] = inputs[0][i] op inputs[1][i] op ... in list order (so
//     every process that reduces the same inputs gets the same bits), one pass that reads each
//     input once, split across the kernel thread pool. Typed arrays of one kind and length:
//     Float32Array, Float64Array, Int32Array, BigInt64Array, Uint8Array; op 0 sum, 1 product,
//     2 max, 3 min (max and min propagate NaN, as torch.maximum does). `out` may be any of the inputs.
//     `threads` (optional, default the pool's): 1 runs on the calling thread alone, more uses the pool
//     (processes that share a host's cores should not each fork across all of them).
//  4. hostPost(buffer, byteOffset, value) / hostWait(buffers, byteOffset, target, timeoutMs): a
//     member's progress counter (a uint32 in its region's header): post stores it and wakes every
//     waiter (a futex on the shared page); wait returns true once every buffer's counter reached
//     `target` (wrap-safe), false after timeoutMs, blocking the calling thread meanwhile (the caller
//     waits in short slices and lets its event loop run between them).
// Each mapping is unmapped (and the region's descriptor closed) when V8 frees its buffer.
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "channels/common.h"
#include "thread_pool.h"

namespace tprpc {
namespace channels {
namespace {

struct Mapping {
  void* base;
  size_t len;
  int fd;  // ours (a created region), -1 for a peer's
};

Napi::ArrayBuffer Wrap(Napi::Env env, void* base, size_t len, int fd) {
  auto* m = new Mapping{base, len, fd};
  return Napi::ArrayBuffer::New(
      env, base, len,
      [](Napi::Env, void*, Mapping* m) {
        munmap(m->base, m->len);
        if (m->fd >= 0) close(m->fd);
        delete m;
      },
      m);
}

size_t LengthArg(const Napi::CallbackInfo& info, size_t i, const char* fn) {
  double n = NumberArg(info, i, fn, "byteLength");
  if (!(n >= 1) || n > 9007199254740991.0) throw Napi::RangeError::New(info.Env(), std::string(fn) + ": byteLength must be >= 1");
  return static_cast<size_t>(n);
}

Napi::Value Fail(Napi::Env env, const std::string& what, int err) {
  throw ToJsError(env, Outcome::Fail(err == ENOMEM ? "ENOMEM" : "EREGION", err, what + ": " + std::strerror(err)));
}

Napi::Value HostRegionCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  size_t len = LengthArg(info, 0, "hostRegionCreate");
  int fd = memfd_create("tprpc-collective", MFD_CLOEXEC);
  if (fd < 0) return Fail(env, "hostRegionCreate: memfd_create", errno);
  if (ftruncate(fd, static_cast<off_t>(len)) != 0) {
    int err = errno;
    close(fd);
    return Fail(env, "hostRegionCreate: ftruncate to " + std::to_string(len) + " bytes", err);
  }
  void* base = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    close(fd);
    return Fail(env, "hostRegionCreate: mmap of " + std::to_string(len) + " bytes", err);
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("buffer", Wrap(env, base, len, fd));
  o.Set("pid", Napi::Number::New(env, getpid()));
  o.Set("fd", Napi::Number::New(env, fd));
  return o;
}

Napi::Value HostRegionOpen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int pid = static_cast<int>(NumberArg(info, 0, "hostRegionOpen", "pid"));
  int rfd = static_cast<int>(NumberArg(info, 1, "hostRegionOpen", "fd"));
  size_t len = LengthArg(info, 2, "hostRegionOpen");
  std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(rfd);
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Fail(env, "hostRegionOpen: open " + path, errno);
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < len) {
    int err = errno;
    close(fd);
    return Fail(env, "hostRegionOpen: " + path + " is not a region of " + std::to_string(len) + " bytes", err ? err : EINVAL);
  }
  void* base = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  int err = errno;
  close(fd);  // NB: the mapping keeps the file
  if (base == MAP_FAILED) return Fail(env, "hostRegionOpen: mmap " + path, err);
  return Wrap(env, base, len, -1);
}

template <typename T>
T Apply(int op, T a, T b) {
  switch (op) {
    case 0:
      return a + b;
    case 1:
      return a * b;
    case 2:
      return (a > b || a != a) ? a : b;
    default:
      return (a < b || a != a) ? a : b;
  }
}

// Integer sum and product wrap (as the typed arrays' stores do), without signed overflow.
template <>
int32_t Apply<int32_t>(int op, int32_t a, int32_t b) {
  if (op == 0) return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
  if (op == 1) return static_cast<int32_t>(static_cast<uint32_t>(a) * static_cast<uint32_t>(b));
  return op == 2 ? (a > b ? a : b) : (a < b ? a : b);
}
template <>
int64_t Apply<int64_t>(int op, int64_t a, int64_t b) {
  if (op == 0) return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  if (op == 1) return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  return op == 2 ? (a > b ? a : b) : (a < b ? a : b);
}
template <>
uint8_t Apply<uint8_t>(int op, uint8_t a, uint8_t b) {
  if (op == 0) return static_cast<uint8_t>(a + b);
  if (op == 1) return static_cast<uint8_t>(a * b);
  return op == 2 ? (a > b ? a : b) : (a < b ? a : b);
}

template <typename T>
void ReduceRange(int op, T* out, const std::vector<const T*>& in, int64_t b, int64_t e) {
  constexpr int64_t kBlock = 1024;  // NB: the block's sum stays in L1 between the inputs' passes
  T acc[kBlock];                    // NB: written to `out` last, so `out` may alias any input
  for (int64_t s = b; s < e; s += kBlock) {
    const int64_t m = std::min(e, s + kBlock) - s;
    if (in.size() == 1) {
      if (out != in[0]) std::memcpy(out + s, in[0] + s, static_cast<size_t>(m) * sizeof(T));
      continue;
    }
    const T* x0 = in[0] + s;
    const T* x1 = in[1] + s;
    switch (op) {  // NB: one switch per block; the loops below vectorise
      case 0:
        for (int64_t i = 0; i < m; i++) acc[i] = Apply<T>(0, x0[i], x1[i]);
        for (size_t k = 2; k < in.size(); k++)
          for (int64_t i = 0; i < m; i++) acc[i] = Apply<T>(0, acc[i], in[k][s + i]);
        break;
      default:
        for (int64_t i = 0; i < m; i++) acc[i] = Apply<T>(op, x0[i], x1[i]);
        for (size_t k = 2; k < in.size(); k++)
          for (int64_t i = 0; i < m; i++) acc[i] = Apply<T>(op, acc[i], in[k][s + i]);
    }
    std::memcpy(out + s, acc, static_cast<size_t>(m) * sizeof(T));
  }
}

template <typename T>
void Reduce(int op, const Napi::TypedArray& out, const std::vector<Napi::TypedArray>& ins, bool pool) {
  T* o = reinterpret_cast<T*>(static_cast<char*>(out.ArrayBuffer().Data()) + out.ByteOffset());
  std::vector<const T*> in;
  for (const auto& a : ins) in.push_back(reinterpret_cast<const T*>(static_cast<char*>(a.ArrayBuffer().Data()) + a.ByteOffset()));
  int64_t n = static_cast<int64_t>(out.ElementLength());
  if (pool)
    ParallelFor(n, 1 << 16, [&](int64_t b, int64_t e) { ReduceRange<T>(op, o, in, b, e); });
  else
    ReduceRange<T>(op, o, in, 0, n);
}

Napi::Value ReduceN(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int op = static_cast<int>(NumberArg(info, 0, "reduceN", "op"));
  if (op < 0 || op > 3) throw Napi::RangeError::New(env, "reduceN: op is 0 (sum), 1 (product), 2 (max) or 3 (min)");
  if (!info[1].IsTypedArray() || !info[2].IsArray()) throw Napi::TypeError::New(env, "reduceN(op, out, inputs): a typed array and an array of them");
  Napi::TypedArray out = info[1].As<Napi::TypedArray>();
  Napi::Array list = info[2].As<Napi::Array>();
  if (list.Length() == 0) throw Napi::RangeError::New(env, "reduceN: no inputs");
  std::vector<Napi::TypedArray> ins;
  for (uint32_t i = 0; i < list.Length(); i++) {
    Napi::Value v = list.Get(i);
    if (!v.IsTypedArray()) throw Napi::TypeError::New(env, "reduceN: inputs[" + std::to_string(i) + "] is not a typed array");
    Napi::TypedArray a = v.As<Napi::TypedArray>();
    if (a.TypedArrayType() != out.TypedArrayType() || a.ElementLength() != out.ElementLength())
      throw Napi::TypeError::New(env, "reduceN: inputs[" + std::to_string(i) + "] differs from out in kind or length");
    ins.push_back(a);
  }
  bool pool = info.Length() < 4 || info[3].IsUndefined() || NumberArg(info, 3, "reduceN", "threads") > 1;
  switch (out.TypedArrayType()) {
    case napi_float32_array:
      Reduce<float>(op, out, ins, pool);
      break;
    case napi_float64_array:
      Reduce<double>(op, out, ins, pool);
      break;
    case napi_int32_array:
      Reduce<int32_t>(op, out, ins, pool);
      break;
    case napi_bigint64_array:
      Reduce<int64_t>(op, out, ins, pool);
      break;
    case napi_uint8_array:
      Reduce<uint8_t>(op, out, ins, pool);
      break;
    default:
      throw Napi::TypeError::New(env, "reduceN: Float32Array, Float64Array, Int32Array, BigInt64Array or Uint8Array");
  }
  return env.Undefined();
}

std::atomic<uint32_t>* CounterAt(const Napi::CallbackInfo& info, const Napi::Value& v, double off, const char* fn) {
  Bytes b = BytesArg(v, fn);
  if (!(off >= 0) || off + 4 > static_cast<double>(b.length) || static_cast<uint64_t>(off) % 4 != 0)
    throw Napi::RangeError::New(info.Env(), std::string(fn) + ": byteOffset must be 4-aligned inside the buffer");
  return reinterpret_cast<std::atomic<uint32_t>*>(b.data + static_cast<size_t>(off));
}

Napi::Value HostPost(const Napi::CallbackInfo& info) {
  std::atomic<uint32_t>* w = CounterAt(info, info[0], NumberArg(info, 1, "hostPost", "byteOffset"), "hostPost");
  w->store(static_cast<uint32_t>(NumberArg(info, 2, "hostPost", "value")), std::memory_order_release);
  FutexWake(w, INT32_MAX);
  return info.Env().Undefined();
}

Napi::Value HostWait(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsArray()) throw Napi::TypeError::New(env, "hostWait: buffers must be an array");
  Napi::Array list = info[0].As<Napi::Array>();
  double off = NumberArg(info, 1, "hostWait", "byteOffset");
  uint32_t target = static_cast<uint32_t>(NumberArg(info, 2, "hostWait", "target"));
  double ms = NumberArg(info, 3, "hostWait", "timeoutMs");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(static_cast<int64_t>(ms * 1000));
  for (uint32_t i = 0; i < list.Length(); i++) {
    std::atomic<uint32_t>* w = CounterAt(info, list.Get(i), off, "hostWait");
    for (int spin = 0;; spin++) {
      uint32_t v = w->load(std::memory_order_acquire);
      if (static_cast<int32_t>(v - target) >= 0) break;
      if (spin < 64) continue;  // NB: a short spin first: the peer is often just about to post
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return Napi::Boolean::New(env, false);
      FutexWait(w, v, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    }
  }
  return Napi::Boolean::New(env, true);
}

}  // namespace

void RegisterHostRegion(Napi::Env env, Napi::Object ns) {
  ns.Set("hostRegionCreate", Napi::Function::New(env, HostRegionCreate));
  ns.Set("hostRegionOpen", Napi::Function::New(env, HostRegionOpen));
  ns.Set("reduceN", Napi::Function::New(env, ReduceN));
  ns.Set("hostPost", Napi::Function::New(env, HostPost));
  ns.Set("hostWait", Napi::Function::New(env, HostWait));
}

}  // namespace channels
}  // namespace tprpc
