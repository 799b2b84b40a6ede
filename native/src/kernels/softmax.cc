// Softmax / log-softmax along one dim, attention's masked and scaled softmax,
// and a fused layer norm over the last dim. Softmax is the stable form of the reference: subtract the row max (0
// for an all -inf row), exponentiate, normalise by the float64 sum; a NaN
// anywhere in a row makes the whole row NaN. Rows contiguous along `dim` use
// the vector kernels (vmath.h), and so do contiguous float32 tensors along
// another dim (vectorized across the columns); other layouts and float64
// run scalar float64 math. Threads: parsing on the JS thread, rows on the pool.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/common.h"
#include "kernels/kernels.h"
#include "kernels/vmath.h"

namespace tprpc {
namespace kern {
namespace {

// One float32 row, contiguous in x and out.
void SoftmaxRowF32(const vmath::F32Kernels& vk, const float* x, float* y, int64_t n, bool log) {
  if (vk.shortSoftmax(x, y, n, log, 1.0f)) return;
  bool nan = false;
  float mx = vk.max(x, n, &nan);
  if (nan) {
    for (int64_t i = 0; i < n; ++i) y[i] = NAN;
    return;
  }
  if (mx == -INFINITY) mx = 0;
  const double sum = vk.expShiftSum(x, y, n, mx);  // y holds exp(x - mx) for now
  if (log) {
    vk.subShift(x, y, n, mx, static_cast<float>(std::log(sum)));
  } else {
    vk.scale(y, n, static_cast<float>(1.0 / sum));
  }
}

// Any layout: n elements at stride sx in x and so in out, in float64 as the reference.
template <typename T>
void SoftmaxRowStrided(const T* x, int64_t sx, T* y, int64_t so, int64_t n, bool log) {
  double mx = -INFINITY;
  for (int64_t k = 0; k < n; ++k) {  // Math.max: a NaN wins
    const double v = x[k * sx];
    if (v != v || v > mx) mx = v;
    if (v != v) break;
  }
  if (mx == -INFINITY) mx = 0;
  double sum = 0;
  for (int64_t k = 0; k < n; ++k) sum += std::exp(x[k * sx] - mx);
  if (log) {
    const double lse = std::log(sum) + mx;
    for (int64_t k = 0; k < n; ++k) y[k * so] = static_cast<T>(x[k * sx] - lse);
  } else {
    for (int64_t k = 0; k < n; ++k) y[k * so] = static_cast<T>(std::exp(x[k * sx] - mx) / sum);
  }
}

// Contiguous float32 [outer, n, inner] with inner > 1 (dim not last): each block of up to kBlock
// columns is reduced along n with vector ops across the columns; blocks run on the pool.
void SoftmaxColumnsF32(const float* x, float* y, int64_t outer, int64_t n, int64_t inner, bool log) {
  constexpr int64_t kBlock = 1024;
  const vmath::F32Kernels& vk = vmath::F32();
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  ParallelFor(outer * blocks, std::max<int64_t>(1, kGrain / (n * std::min(inner, kBlock))), [&](int64_t b, int64_t e) {
    float mx[kBlock], shift[kBlock];
    double sum[kBlock];
    for (int64_t t = b; t < e; ++t) {
      const int64_t p = t / blocks, q0 = (t % blocks) * kBlock, w = std::min(kBlock, inner - q0);
      const float* xb = x + p * n * inner + q0;
      float* yb = y + p * n * inner + q0;
      std::fill(mx, mx + w, -INFINITY);
      for (int64_t k = 0; k < n; ++k) vk.binary(kern::BOp::Maximum, mx, 1, xb + k * inner, 1, mx, w);  // a NaN wins
      for (int64_t q = 0; q < w; ++q) mx[q] = mx[q] == -INFINITY ? 0.0f : mx[q];
      std::fill(sum, sum + w, 0.0);
      for (int64_t k = 0; k < n; ++k) {
        float* yr = yb + k * inner;
        vk.binary(kern::BOp::Sub, xb + k * inner, 1, mx, 1, yr, w);
        vk.unary(kern::UOp::Exp, yr, yr, w, 0, 0);
        vk.accumulate(yr, sum, w);
      }
      for (int64_t q = 0; q < w; ++q) shift[q] = static_cast<float>(log ? std::log(sum[q]) : 1.0 / sum[q]);
      for (int64_t k = 0; k < n; ++k) {
        float* yr = yb + k * inner;
        if (log) {  // (x - max) - log(sum): both terms <= 0, nothing cancels
          vk.binary(kern::BOp::Sub, xb + k * inner, 1, mx, 1, yr, w);
          vk.binary(kern::BOp::Sub, yr, 1, shift, 1, yr, w);
        } else {
          vk.binary(kern::BOp::Mul, yr, 1, shift, 1, yr, w);
        }
      }
    }
  });
}

// softmax(x, dim, log, out); out has x's shape.
Napi::Value Softmax(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  View x = ParseView(info[0], "x");
  const int64_t dim = IntArg(info, 1, "softmax", "dim");
  const bool log = info[2].ToBoolean().Value();
  View out = ParseView(info[3], "out");
  if (x.ndim() == 0 && out.ndim() == 0) {  // NB: as in the reference, a 0-d x is one row of one
    x.shape = out.shape = {1};
    x.strides = out.strides = {1};
  }
  if (dim < 0 || dim >= x.ndim()) throw Napi::RangeError::New(env, "softmax: dim out of range");
  CheckShape(env, out, x.shape, "softmax", "out");
  if (out.dtype != x.dtype || (x.dtype != DType::F32 && x.dtype != DType::F64))
    ThrowType(env, "softmax: x and out must both be float32 or both float64");
  const int64_t n = x.shape[dim];
  int64_t inner = 1;
  for (int d = static_cast<int>(dim) + 1; d < x.ndim(); ++d) inner *= x.shape[d];
  if (x.dtype == DType::F32 && inner > 1 && x.contiguous() && out.contiguous()) {
    SoftmaxColumnsF32(static_cast<const float*>(x.data) + x.offset, static_cast<float*>(out.data) + out.offset,
                      x.numel() / std::max<int64_t>(1, n * inner), n, inner, log);
    return env.Undefined();
  }
  std::vector<int64_t> rows = x.shape;
  rows[dim] = 1;
  Iter<2> it = MakeIter<2>(rows, {&out, &x});  // one element per row start
  const int64_t sx = x.strides[dim], so = out.strides[dim];
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, n));
  const vmath::F32Kernels& vk = vmath::F32();
  DispatchAll(x.dtype, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_floating_point<T>::value) {
      const int64_t rso = it.innerStride(0), rsx = it.innerStride(1);
      ParallelRows<2>(
          it,
          [&](const std::array<int64_t, 2>& off, int64_t m) {
            for (int64_t j = 0; j < m; ++j) {
              T* y = static_cast<T*>(out.data) + off[0] + j * rso;
              const T* px = static_cast<const T*>(x.data) + off[1] + j * rsx;
              if constexpr (std::is_same<T, float>::value) {
                if ((sx == 1 && so == 1) || n == 1) {
                  SoftmaxRowF32(vk, px, y, n, log);
                  continue;
                }
              }
              SoftmaxRowStrided<T>(px, sx, y, so, n, log);
            }
          },
          grain);
    }
  });
  return env.Undefined();
}

// maskedSoftmax(x, mask, divisor, out): attention's softmax(where(mask, -inf, x / divisor)) along the
// last dim of a contiguous x [..., T, S]; mask (uint8, true = masked) is a contiguous [T, S] matrix
// shared by every leading index. Each row is written divided and masked into out first, then
// normalised in place by the row kernels above, so the result equals the three-op composite.
//
// Float32 rows work on their mask row's span [lo, hi), from its first unmasked column to its last (`spans`,
// one pair per mask row; a causal mask's row t is [0, t + 1)): outside it every element is exp(-inf) = 0
// in the composite too, so it is written 0 without the divide, the exp and the sum (half of the work of a
// causal mask). A row whose span holds a NaN (or an unmasked +inf, which makes one) is NaN throughout, as
// the composite's 0 * (1 / NaN) makes its masked elements; a fully masked row (empty span) goes whole
// through the row kernels, which make it NaN as the composite does.
template <typename T>
__attribute__((always_inline)) inline void MaskedSoftmaxRows(const T* x, const uint8_t* mask, double divisor, T* y,
                                                             int64_t rows, int64_t T_, int64_t S,
                                                             const int64_t* spans, const uint8_t* clean) {
  const T d = static_cast<T>(divisor);
  const vmath::F32Kernels& vk = vmath::F32();
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * S;
    const uint8_t* mr = mask + (r % T_) * S;
    T* yr = y + r * S;
    if constexpr (std::is_same<T, float>::value) {
      int64_t lo = spans[2 * (r % T_)], hi = spans[2 * (r % T_) + 1];
      if (lo >= hi) lo = 0, hi = S;
      // A span with nothing masked inside it (a causal mask's) goes in one pass, divided in registers.
      if (!(clean[r % T_] && vk.shortSoftmax(xr + lo, yr + lo, hi - lo, false, d))) {
        // NB: as bits, so that the loop vectorizes (GCC keeps `mask ? -inf : x / d` a branch per element)
        for (int64_t j = lo; j < hi; ++j) {
          const float q = xr[j] / d;
          uint32_t qb;
          std::memcpy(&qb, &q, 4);
          const uint32_t m = 0u - static_cast<uint32_t>(mr[j] != 0);
          const uint32_t rb = (m & 0xFF800000u) | (~m & qb);  // -inf where masked
          std::memcpy(yr + j, &rb, 4);
        }
        SoftmaxRowF32(vk, yr + lo, yr + lo, hi - lo, false);
      }
      const float outside = std::isnan(yr[lo]) ? NAN : 0.0f;
      std::fill(yr, yr + lo, outside);
      std::fill(yr + hi, yr + S, outside);
    } else {
      for (int64_t j = 0; j < S; ++j) yr[j] = mr[j] ? static_cast<T>(-INFINITY) : xr[j] / d;
      SoftmaxRowStrided<T>(yr, 1, yr, 1, S, false);
    }
  }
}

// The float32 rows compiled for AVX2 too (TPRPC_AVX2_CLONES), for the divide-and-mask loop.
TPRPC_AVX2_CLONES void MaskedSoftmaxF32(const float* x, const uint8_t* mask, double divisor, float* y, int64_t rows,
                                        int64_t T_, int64_t S, const int64_t* spans, const uint8_t* clean) {
  MaskedSoftmaxRows<float>(x, mask, divisor, y, rows, T_, S, spans, clean);
}

Napi::Value MaskedSoftmax(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  View x = ParseView(info[0], "x"), mask = ParseView(info[1], "mask");
  if (!info[2].IsNumber()) ThrowType(env, "maskedSoftmax: divisor must be a number");
  const double divisor = info[2].As<Napi::Number>().DoubleValue();
  View out = ParseView(info[3], "out");
  if (x.ndim() < 2 || !x.contiguous() || (x.dtype != DType::F32 && x.dtype != DType::F64))
    ThrowType(env, "maskedSoftmax: x must be a contiguous float32/float64 tensor [..., T, S]");
  CheckShape(env, out, x.shape, "maskedSoftmax", "out");
  if (out.dtype != x.dtype || !out.contiguous()) ThrowType(env, "maskedSoftmax: out must be contiguous with x's dtype");
  const int64_t T_ = x.shape[x.ndim() - 2], S = x.shape.back();
  if (mask.dtype != DType::U8 || mask.ndim() != 2 || mask.shape[0] != T_ || mask.shape[1] != S || !mask.contiguous())
    ThrowType(env, "maskedSoftmax: mask must be a contiguous bool [T, S] matrix");
  const int64_t rows = S ? x.numel() / S : 0;
  if (x.dtype == DType::F32) {
    std::vector<int64_t> spans(2 * T_);  // per mask row: first unmasked column, last unmasked column + 1
    std::vector<uint8_t> clean(T_);      // per mask row: nothing masked inside its (non-empty) span
    const uint8_t* m = mask.ptr<uint8_t>();
    for (int64_t t = 0; t < T_; ++t) {
      const uint8_t* mr = m + t * S;
      int64_t lo = 0, hi = S;
      while (lo < S && mr[lo] != 0) ++lo;
      while (hi > lo && mr[hi - 1] != 0) --hi;
      spans[2 * t] = lo;
      spans[2 * t + 1] = hi;
      clean[t] = lo < hi && std::find_if(mr + lo, mr + hi, [](uint8_t b) { return b != 0; }) == mr + hi;
    }
    MaskedSoftmaxF32(x.ptr<float>(), m, divisor, out.ptr<float>(), rows, T_, S, spans.data(), clean.data());
  } else {
    MaskedSoftmaxRows<double>(x.ptr<double>(), mask.ptr<uint8_t>(), divisor, out.ptr<double>(), rows, T_, S, nullptr,
                              nullptr);
  }
  return env.Undefined();
}

// layerNorm(x, weight|null, bias|null, eps, out, mean|null, rstd|null): over the last dim D of a
// contiguous x; mean and rstd ([rows], x's dtype) receive the statistics (biased variance).
template <typename T>
void LayerNormRows(const View& x, const T* w, const T* b, double eps, const View& out, T* mean, T* rstd, int64_t rows,
                   int64_t D) {
  const T* px = static_cast<const T*>(x.data) + x.offset;
  T* py = static_cast<T*>(out.data) + out.offset;
  const vmath::F32Kernels& vk = vmath::F32();
  ParallelFor(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, D)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = px + r * D;
      T* yr = py + r * D;
      double mu, var;
      if constexpr (std::is_same<T, float>::value) {
        mu = vk.sum(xr, D) / D;
        const float muf = static_cast<float>(mu);
        const double shift = mu - muf;
        var = vk.sumSqDev(xr, D, muf) / D - shift * shift;
      } else {
        double s = 0;
        for (int64_t i = 0; i < D; ++i) s += xr[i];
        mu = s / D;
        double q = 0;
        for (int64_t i = 0; i < D; ++i) q += (xr[i] - mu) * (xr[i] - mu);
        var = q / D;
      }
      const double rs = 1 / std::sqrt(std::fmax(var, 0.0) + eps);
      if (mean) mean[r] = static_cast<T>(mu);
      if (rstd) rstd[r] = static_cast<T>(rs);
      if constexpr (std::is_same<T, float>::value) {
        vk.normalize(xr, yr, D, static_cast<float>(mu), static_cast<float>(rs), w, b);
      } else {
        for (int64_t i = 0; i < D; ++i) yr[i] = (xr[i] - mu) * rs * (w ? w[i] : 1) + (b ? b[i] : 0);
      }
    }
  });
}

Napi::Value LayerNorm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  View x = ParseView(info[0], "x");
  if (x.ndim() < 1) ThrowType(env, "layerNorm: x must have at least one dim");
  if (!x.contiguous()) ThrowType(env, "layerNorm: x must be contiguous");
  if (x.dtype != DType::F32 && x.dtype != DType::F64) ThrowType(env, "layerNorm: x must be float32 or float64");
  const int64_t D = x.shape.back(), rows = D ? x.numel() / D : 0;
  auto optional = [&](size_t i, const char* what, int64_t len) -> void* {
    if (info.Length() <= i || info[i].IsNull() || info[i].IsUndefined()) return nullptr;
    View v = ParseView(info[i], what);
    if (v.dtype != x.dtype || v.numel() != len || !v.contiguous())
      ThrowType(env, std::string("layerNorm: ") + what + " must be a contiguous tensor of x's dtype with " +
                         std::to_string(len) + " elements");
    return static_cast<uint8_t*>(v.data) + v.offset * ItemSize(v.dtype);
  };
  void* w = optional(1, "weight", D);
  void* b = optional(2, "bias", D);
  if (!info[3].IsNumber()) ThrowType(env, "layerNorm: eps must be a number");
  const double eps = info[3].As<Napi::Number>().DoubleValue();
  View out = ParseView(info[4], "out");
  CheckShape(env, out, x.shape, "layerNorm", "out");
  if (out.dtype != x.dtype || !out.contiguous()) ThrowType(env, "layerNorm: out must be contiguous with x's dtype");
  void* mean = optional(5, "mean", rows);
  void* rstd = optional(6, "rstd", rows);
  if (x.dtype == DType::F32)
    LayerNormRows<float>(x, static_cast<float*>(w), static_cast<float*>(b), eps, out, static_cast<float*>(mean),
                         static_cast<float*>(rstd), rows, D);
  else
    LayerNormRows<double>(x, static_cast<double*>(w), static_cast<double*>(b), eps, out, static_cast<double*>(mean),
                          static_cast<double*>(rstd), rows, D);
  return env.Undefined();
}

}  // namespace
}  // namespace kern

void RegisterSoftmax(Napi::Env env, Napi::Object exports) {
  exports.Set("softmax", Napi::Function::New(env, kern::Softmax));
  exports.Set("layerNorm", Napi::Function::New(env, kern::LayerNorm));
  exports.Set("maskedSoftmax", Napi::Function::New(env, kern::MaskedSoftmax));
}

}  // namespace tprpc
