// Helpers shared by the kernel groups (internal to native/src/kernels):
// argument parsing, dtype dispatch, the value conversions that mirror the
// TypeScript reference (JS typed-array stores), and a strided iterator that
// coalesces dims and walks rows of the innermost dim for up to four operands.
// Everything here runs on whichever thread calls it: parsing on the JS
// thread, iteration on the JS thread or a pool worker inside ParallelFor.
#pragma once
#include <napi.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "thread_pool.h"
#include "view.h"

namespace tprpc {
namespace kern {

// Work below this many elements stays on the calling thread.
constexpr int64_t kGrain = 32768;

// A float32 loop compiled twice on x86-64, for the baseline (SSE2) and for AVX2, the loader picking AVX2
// where the CPU has it (GCC's target_clones). Not AVX-512: its FMA would round a * b + c once where the
// tensor ops round twice (the build's -ffp-contract=off forbids that contraction anyway; AVX2 alone has
// no FMA). Elsewhere, compiled once.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TPRPC_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TPRPC_AVX2_CLONES
#endif

inline const char* DTypeName(DType d) {
  switch (d) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
  }
  return "?";
}

inline size_t ItemSize(DType d) {
  switch (d) {
    case DType::F64:
    case DType::I64: return 8;
    case DType::F32:
    case DType::I32: return 4;
    case DType::U8: return 1;
  }
  return 1;
}

[[noreturn]] inline void ThrowType(Napi::Env env, const std::string& msg) { throw Napi::TypeError::New(env, msg); }

inline std::string OpString(const Napi::CallbackInfo& info, size_t i, const char* fn) {
  if (!info[i].IsString()) ThrowType(info.Env(), std::string(fn) + ": op must be a string");
  return info[i].As<Napi::String>().Utf8Value();
}

inline int64_t IntArg(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* name) {
  if (!info[i].IsNumber()) ThrowType(info.Env(), std::string(fn) + ": " + name + " must be a number");
  return info[i].As<Napi::Number>().Int64Value();
}

// Throws unless `a` has `shape`.
inline void CheckShape(Napi::Env env, const View& a, const std::vector<int64_t>& shape, const char* fn, const char* an) {
  if (a.shape != shape) ThrowType(env, std::string(fn) + ": " + an + " has the wrong shape");
}

// ---- value conversions (as a JS typed-array store of a Number) -------------------------------

// Number -> int32/uint8: NaN and infinities become 0, otherwise truncate and wrap (ToInt32/ToUint8).
template <typename I>
inline I WrapToInt(double v) {
  if (!std::isfinite(v)) return 0;
  double t = std::trunc(v);
  if (std::fabs(t) < 9007199254740992.0) return static_cast<I>(static_cast<uint64_t>(static_cast<int64_t>(t)));
  double m = std::fmod(t, 18446744073709551616.0);
  if (m < 0) m += 18446744073709551616.0;
  return static_cast<I>(static_cast<uint64_t>(m));
}

// Number -> int64 as sdk/tensor/access.ts writes it: truncate; +inf -> max, -inf/NaN -> min; wrap beyond.
inline int64_t ToInt64(double v) {
  if (!std::isfinite(v)) return v > 0 ? INT64_MAX : INT64_MIN;
  double t = std::trunc(v);
  if (t >= -9223372036854775808.0 && t < 9223372036854775808.0) return static_cast<int64_t>(t);
  double m = std::fmod(t, 18446744073709551616.0);
  if (m < 0) m += 18446744073709551616.0;
  return static_cast<int64_t>(static_cast<uint64_t>(m));
}

// Cast between the five storage types. Same-kind and widening casts are plain static_casts.
template <typename D, typename S>
inline D Cast(S v) {
  if constexpr (std::is_same<D, S>::value) {
    return v;
  } else if constexpr (std::is_floating_point<D>::value) {
    // NB: int64 goes through double first, as the reference reads it as a Number.
    return static_cast<D>(static_cast<double>(v));
  } else if constexpr (std::is_floating_point<S>::value) {
    if constexpr (std::is_same<D, int64_t>::value) return ToInt64(static_cast<double>(v));
    else return WrapToInt<D>(static_cast<double>(v));
  } else {
    return static_cast<D>(v);  // integer -> integer wraps modulo 2^bits
  }
}

// Calls f(T{}) with T the C++ type of `d`.
template <typename F>
inline auto DispatchAll(DType d, F&& f) {
  switch (d) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    case DType::I32: return f(int32_t{});
    case DType::I64: return f(int64_t{});
    case DType::U8: break;
  }
  return f(uint8_t{});
}

// ---- strided iteration ---------------------------------------------------------------------

// An iteration space over a row-major logical shape with N operands' strides,
// after dropping size-1 dims and merging dims that are contiguous in every
// operand. The last dim is the "row" that inner loops walk.
template <int N>
struct Iter {
  std::vector<int64_t> shape;                  // at least one dim
  std::vector<std::array<int64_t, N>> strides;  // per dim, per operand
  std::array<int64_t, N> base{};               // each operand's view offset
  int64_t numel = 1;

  int ndim() const { return static_cast<int>(shape.size()); }
  int64_t inner() const { return shape.back(); }
  int64_t innerStride(int k) const { return strides.back()[k]; }
};

template <int N>
Iter<N> MakeIter(const std::vector<int64_t>& shape, const std::array<const View*, N>& ops) {
  Iter<N> it;
  for (int k = 0; k < N; ++k) it.base[k] = ops[k]->offset;
  for (size_t d = 0; d < shape.size(); ++d) {
    it.numel *= shape[d];
    if (shape[d] == 1) continue;
    std::array<int64_t, N> s;
    for (int k = 0; k < N; ++k) s[k] = ops[k]->strides[d];
    if (!it.shape.empty()) {
      bool merge = true;
      for (int k = 0; k < N; ++k) merge = merge && it.strides.back()[k] == s[k] * shape[d];
      if (merge) {
        it.shape.back() *= shape[d];
        it.strides.back() = s;
        continue;
      }
    }
    it.shape.push_back(shape[d]);
    it.strides.push_back(s);
  }
  if (it.shape.empty()) {
    it.shape.push_back(1);  // every dim had size 1 (size-0 dims are kept, so numel is 1 here)
    it.strides.push_back({});
  }
  return it;
}

// Walks logical elements [begin, end) of `it` row by row: f(offs, n) gets each
// operand's element offset at the row start and the run length n (the row's
// inner stride per operand is it.innerStride(k)).
template <int N, typename F>
void ForRows(const Iter<N>& it, int64_t begin, int64_t end, F&& f) {
  if (begin >= end) return;
  const int nd = it.ndim();
  const int64_t inner = it.inner();
  std::array<int64_t, 8> idx{};  // coordinates; a heap vector beyond 8 dims
  std::vector<int64_t> bigIdx;
  int64_t* coord = idx.data();
  if (nd > 8) {
    bigIdx.assign(nd, 0);
    coord = bigIdx.data();
  }
  std::array<int64_t, N> off = it.base;
  int64_t rest = begin;
  for (int d = nd - 1; d >= 0; --d) {
    coord[d] = rest % it.shape[d];
    rest /= it.shape[d];
    for (int k = 0; k < N; ++k) off[k] += coord[d] * it.strides[d][k];
  }
  int64_t pos = begin;
  while (pos < end) {
    int64_t n = std::min(inner - coord[nd - 1], end - pos);
    f(off, n);
    pos += n;
    // advance the innermost coordinate by n, then carry (odometer)
    coord[nd - 1] += n;
    for (int k = 0; k < N; ++k) off[k] += n * it.strides[nd - 1][k];
    for (int d = nd - 1; d > 0 && coord[d] == it.shape[d]; --d) {
      for (int k = 0; k < N; ++k) off[k] += it.strides[d - 1][k] - it.shape[d] * it.strides[d][k];
      coord[d] = 0;
      ++coord[d - 1];
    }
  }
}

// ForRows over the whole space, split across the thread pool when large.
template <int N, typename F>
void ParallelRows(const Iter<N>& it, F&& f, int64_t grain = kGrain) {
  ParallelFor(it.numel, grain, [&](int64_t b, int64_t e) { ForRows<N>(it, b, e, f); });
}

}  // namespace kern
}  // namespace tprpc
