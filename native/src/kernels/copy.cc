// copy (strided to strided, with casts between float32/float64/int32/int64/
// uint8) and fill. Casts follow the reference's typed-array stores: float to
// int truncates toward zero, NaN and infinities become 0 for int32/uint8 and
// saturate for int64 (see Cast in common.h). Bool normalisation is the sdk's
// job (a bool storage is plain uint8 here). Same-dtype contiguous copies are
// memcpy. Threads: parsing on the JS thread, the copy on the pool.
#include <cstring>

#include "kernels/common.h"
#include "kernels/kernels.h"

namespace tprpc {
namespace kern {
namespace {

template <typename D, typename S>
void CopyRows(const Iter<2>& it, const View& dst, const View& src) {
  const int64_t sd = it.innerStride(0), ss = it.innerStride(1);
  D* pd = static_cast<D*>(dst.data);
  const S* ps = static_cast<const S*>(src.data);
  ParallelRows<2>(it, [&](const std::array<int64_t, 2>& off, int64_t n) {
    D* d = pd + off[0];
    const S* s = ps + off[1];
    if constexpr (std::is_same<D, S>::value) {
      if (sd == 1 && ss == 1) {
        std::memcpy(d, s, n * sizeof(D));
        return;
      }
    }
    if (sd == 1 && ss == 1) {
      for (int64_t i = 0; i < n; ++i) d[i] = Cast<D>(s[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) d[i * sd] = Cast<D>(s[i * ss]);
    }
  });
}

// copy(src, dst): dst[i] = cast(src[i]) for views of one shape.
Napi::Value Copy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  View src = ParseView(info[0], "src"), dst = ParseView(info[1], "dst");
  CheckShape(env, src, dst.shape, "copy", "src");
  Iter<2> it = MakeIter<2>(dst.shape, {&dst, &src});
  // NB: a same-dtype copy moves bits, so int64 and uint8 (bool) round-trip whatever they hold.
  if (src.dtype == dst.dtype) {
    switch (ItemSize(src.dtype)) {
      case 1: CopyRows<uint8_t, uint8_t>(it, dst, src); break;
      case 4: CopyRows<uint32_t, uint32_t>(it, dst, src); break;
      default: CopyRows<uint64_t, uint64_t>(it, dst, src); break;
    }
    return env.Undefined();
  }
  DispatchAll(dst.dtype, [&](auto d) {
    DispatchAll(src.dtype, [&](auto s) { CopyRows<decltype(d), decltype(s)>(it, dst, src); });
  });
  return env.Undefined();
}

template <typename T>
void FillRows(const View& dst, double value) {
  const T v = Cast<T>(value);
  Iter<1> it = MakeIter<1>(dst.shape, {&dst});
  const int64_t s = it.innerStride(0);
  T* p = static_cast<T*>(dst.data);
  ParallelRows<1>(it, [&](const std::array<int64_t, 1>& off, int64_t n) {
    T* d = p + off[0];
    if (s == 1) std::fill(d, d + n, v);
    else
      for (int64_t i = 0; i < n; ++i) d[i * s] = v;
  });
}

// fill(dst, value): every element of the view set to value, cast to dst's dtype.
Napi::Value Fill(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  View dst = ParseView(info[0], "dst");
  if (!info[1].IsNumber()) ThrowType(env, "fill: value must be a number");
  const double value = info[1].As<Napi::Number>().DoubleValue();
  DispatchAll(dst.dtype, [&](auto t) { FillRows<decltype(t)>(dst, value); });
  return env.Undefined();
}

}  // namespace
}  // namespace kern

void RegisterCopy(Napi::Env env, Napi::Object exports) {
  exports.Set("copy", Napi::Function::New(env, kern::Copy));
  exports.Set("fill", Napi::Function::New(env, kern::Fill));
}

}  // namespace tprpc
