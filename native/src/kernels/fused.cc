// Fused training kernels: the Adam/AdamW and SGD updates, the layer norm backward, the (log-)softmax
// backward and GELU's backward, each one pass over its tensors instead of a chain of elementwise ops, each
// allocating its result (sdk/optim/adam.ts, sdk/autograd/ops/norm.ts call
// them through the backend; the TypeScript backend has the same loops, or, for the optional
// ones, the caller the same chain of ops).
// Threads: parsing and the loops run on the JS thread. NB: these are
// memory-bound single passes over at most a few MB; the pool's hand-off
// would cost more than it saves at the sizes a training step has. GELU's
// backward (transcendental per element) splits over the pool as the unary ops do.
#include <algorithm>
#include <cmath>

#include "kernels/common.h"
#include "kernels/kernels.h"
#include "kernels/vmath.h"

namespace tprpc {
namespace kern {
namespace {

// The scalars of one Adam step, as sdk/tensor/backend/interface.ts's AdamStepArgs.
struct AdamArgs {
  double decay;         // p *= decay first (AdamW: 1 - lr * weightDecay); 1: none
  double l2;            // g += l2 * p (Adam's weight decay); 0: none
  double beta1, oneMinusBeta1, beta2, oneMinusBeta2;
  double bc2Sqrt;       // sqrt(1 - beta2^t)
  double eps;
  double negStepSize;   // -lr / (1 - beta1^t)
  bool maximize;
};

// NB: every line is one op of the composite it replaces, rounded to T, in the same order, so the
// float32 result is bit-identical to it (no FMA contraction: binding.gyp's -ffp-contract=off). In
// blocks, one plain loop per step, so each vectorizes (one loop testing the options per element did
// not: "control flow in loop", 164 us for a 512x128 parameter).
template <typename T>
__attribute__((always_inline)) inline void AdamLoop(T* p, const T* grad, T* m, T* v, T* vmax, int64_t n,
                                                    const AdamArgs& a) {
  const T decay = static_cast<T>(a.decay), l2 = static_cast<T>(a.l2), b1 = static_cast<T>(a.beta1),
          omb1 = static_cast<T>(a.oneMinusBeta1), b2 = static_cast<T>(a.beta2),
          omb2 = static_cast<T>(a.oneMinusBeta2), bc2 = static_cast<T>(a.bc2Sqrt), eps = static_cast<T>(a.eps),
          step = static_cast<T>(a.negStepSize);
  const bool decoupled = a.decay != 1, coupled = a.l2 != 0;
  constexpr int64_t kBlock = 1024;
  T gb[kBlock], pb[kBlock], sb[kBlock];
  for (int64_t s = 0; s < n; s += kBlock) {
    const int64_t k = std::min(kBlock, n - s);
    const T* gs = grad + s;
    T* ps = p + s;
    T* ms = m + s;
    T* vs = v + s;
    if (a.maximize)
      for (int64_t j = 0; j < k; ++j) gb[j] = -gs[j];
    else
      for (int64_t j = 0; j < k; ++j) gb[j] = gs[j];
    if (decoupled)
      for (int64_t j = 0; j < k; ++j) pb[j] = ps[j] * decay;
    else
      for (int64_t j = 0; j < k; ++j) pb[j] = ps[j];
    if (coupled)
      for (int64_t j = 0; j < k; ++j) gb[j] = gb[j] + pb[j] * l2;
    for (int64_t j = 0; j < k; ++j) {
      T mi = ms[j] * b1;
      ms[j] = mi + gb[j] * omb1;
      T vi = vs[j] * b2;
      const T gg = gb[j] * gb[j];
      vs[j] = vi + gg * omb2;
    }
    const T* second = vs;
    if (vmax) {
      T* xs = vmax + s;
      for (int64_t j = 0; j < k; ++j) {
        const T cur = xs[j], vi = vs[j];
        const T mx = (cur != cur || vi != vi) ? static_cast<T>(NAN) : (cur > vi ? cur : vi);
        xs[j] = mx;
        sb[j] = mx;
      }
      second = sb;
    }
    for (int64_t j = 0; j < k; ++j) {
      T denom = std::sqrt(second[j]) / bc2;
      denom = denom + eps;
      const T ratio = ms[j] / denom;
      ps[j] = pb[j] + ratio * step;
    }
  }
}

// The float32 loop compiled for AVX2 too (TPRPC_AVX2_CLONES, kernels/common.h). On this project's AMD
// EPYC, a 512x128 Adam step: 164 us (one loop testing the options per element, scalar), 34 us.
TPRPC_AVX2_CLONES void AdamF32(float* p, const float* grad, float* m, float* v, float* vmax, int64_t n,
                               const AdamArgs& a) {
  AdamLoop<float>(p, grad, m, v, vmax, n, a);
}

// adamStep(p, grad, expAvg, expAvgSq, maxExpAvgSq|null, decay, l2, beta1, oneMinusBeta1, beta2,
//          oneMinusBeta2, bc2Sqrt, eps, negStepSize, maximize): in place on p, expAvg, expAvgSq (and
// maxExpAvgSq); all contiguous, one float dtype, one element count.
Napi::Value AdamStep(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  View p = ParseView(info[0], "p"), g = ParseView(info[1], "grad"), m = ParseView(info[2], "expAvg"),
       v = ParseView(info[3], "expAvgSq");
  const bool ams = !(info[4].IsNull() || info[4].IsUndefined());
  View vm = ams ? ParseView(info[4], "maxExpAvgSq") : View{};
  if (p.dtype != DType::F32 && p.dtype != DType::F64) ThrowType(env, "adamStep: p must be float32 or float64");
  const int64_t n = p.numel();
  for (const View* t : {&p, &g, &m, &v, ams ? &vm : &p})
    if (t->dtype != p.dtype || t->numel() != n || !t->contiguous())
      ThrowType(env, "adamStep: p, grad and the state buffers must be contiguous with one dtype and element count");
  double s[9];
  for (int i = 0; i < 9; ++i) {
    if (!info[5 + i].IsNumber()) ThrowType(env, "adamStep: the hyperparameters must be numbers");
    s[i] = info[5 + i].As<Napi::Number>().DoubleValue();
  }
  const AdamArgs a{s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], info[14].ToBoolean().Value()};
  if (p.dtype == DType::F32)
    AdamF32(p.ptr<float>(), g.ptr<float>(), m.ptr<float>(), v.ptr<float>(), ams ? vm.ptr<float>() : nullptr, n, a);
  else
    AdamLoop<double>(p.ptr<double>(), g.ptr<double>(), m.ptr<double>(), v.ptr<double>(),
                     ams ? vm.ptr<double>() : nullptr, n, a);
  return env.Undefined();
}

// The scalars of one SGD step, as sdk/optim/sgd.ts's options.
struct SgdArgs {
  double lr, momentum, dampening, weightDecay;
  bool nesterov, maximize, first;  // first: buf is written (the clone of d), not read
};

// torch.optim.SGD's single-tensor update, op for op as sdk/optim/sgd.ts writes it with tensor ops
// (each line one op rounded to T, scalars rounded to T as a scalar operand is; no FMA contraction).
// NB: in blocks, one plain loop per line, so every loop vectorizes (a loop testing the options per
// element did not: 6% of a FedAvg step in perf, a third of its GEMMs).
template <typename T>
__attribute__((always_inline)) inline void SgdLoop(T* p, const T* grad, T* buf, int64_t n, const SgdArgs& a) {
  const T wd = static_cast<T>(a.weightDecay), mom = static_cast<T>(a.momentum),
          keep = static_cast<T>(1 - a.dampening), negLr = static_cast<T>(-a.lr);
  const bool useBuf = buf != nullptr && a.momentum != 0, scaled = (1 - a.dampening) != 1;
  constexpr int64_t kBlock = 1024;
  T d[kBlock];
  for (int64_t s = 0; s < n; s += kBlock) {
    const int64_t m = std::min(kBlock, n - s);
    T* ps = p + s;
    const T* gs = grad + s;
    if (a.maximize)
      for (int64_t j = 0; j < m; ++j) d[j] = -gs[j];
    else
      for (int64_t j = 0; j < m; ++j) d[j] = gs[j];
    if (a.weightDecay != 0)
      for (int64_t j = 0; j < m; ++j) d[j] = d[j] + ps[j] * wd;
    if (useBuf) {
      T* bs = buf + s;
      if (a.first)
        for (int64_t j = 0; j < m; ++j) bs[j] = d[j];
      else if (scaled)
        for (int64_t j = 0; j < m; ++j) bs[j] = bs[j] * mom + d[j] * keep;
      else
        for (int64_t j = 0; j < m; ++j) bs[j] = bs[j] * mom + d[j];
      if (a.nesterov)
        for (int64_t j = 0; j < m; ++j) d[j] = d[j] + bs[j] * mom;
      else
        for (int64_t j = 0; j < m; ++j) d[j] = bs[j];
    }
    for (int64_t j = 0; j < m; ++j) ps[j] = ps[j] + d[j] * negLr;
  }
}

// The float32 loop twice, as AdamF32.
TPRPC_AVX2_CLONES void SgdF32(float* p, const float* grad, float* buf, int64_t n, const SgdArgs& a) {
  SgdLoop<float>(p, grad, buf, n, a);
}

// sgdStep(p, grad, buf|null, lr, momentum, dampening, weightDecay, nesterov, maximize, first): in place
// on p (and buf); all contiguous, one float dtype, one element count.
Napi::Value SgdStep(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  View p = ParseView(info[0], "p"), g = ParseView(info[1], "grad");
  const bool hasBuf = !(info[2].IsNull() || info[2].IsUndefined());
  View b = hasBuf ? ParseView(info[2], "buf") : View{};
  if (p.dtype != DType::F32 && p.dtype != DType::F64) ThrowType(env, "sgdStep: p must be float32 or float64");
  const int64_t n = p.numel();
  for (const View* t : {&p, &g, hasBuf ? &b : &p})
    if (t->dtype != p.dtype || t->numel() != n || !t->contiguous())
      ThrowType(env, "sgdStep: p, grad and buf must be contiguous with one dtype and element count");
  double s[4];
  for (int i = 0; i < 4; ++i) {
    if (!info[3 + i].IsNumber()) ThrowType(env, "sgdStep: the hyperparameters must be numbers");
    s[i] = info[3 + i].As<Napi::Number>().DoubleValue();
  }
  const SgdArgs a{s[0], s[1], s[2], s[3], info[7].ToBoolean().Value(), info[8].ToBoolean().Value(),
                  info[9].ToBoolean().Value()};
  if (p.dtype == DType::F32)
    SgdF32(p.ptr<float>(), g.ptr<float>(), hasBuf ? b.ptr<float>() : nullptr, n, a);
  else
    SgdLoop<double>(p.ptr<double>(), g.ptr<double>(), hasBuf ? b.ptr<double>() : nullptr, n, a);
  return env.Undefined();
}

// Σ p[0..n) in float64, over eight independent partial sums (a loop the compiler vectorizes; one
// running sum is a chain of dependent adds, the whole cost of a 128-wide row).
template <typename T>
__attribute__((always_inline)) inline double PartialSums(const T* p, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k) acc[k] += static_cast<double>(p[j + k]);
  for (; j < n; ++j) acc[0] += static_cast<double>(p[j]);
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// Per row r of x [rows, D] with x̂ = (x - mean) rstd and ĝ = g w:
//   gx = rstd (ĝ - mean(ĝ) - x̂ mean(ĝ x̂));  gw += g x̂;  gb += g   (gw, gb summed over rows)
// Row and column sums accumulate in float64. Five plain loops a row, so each vectorizes (one fused
// loop mixing float and float64 lanes stayed scalar, 1.8x slower): the float products into a row
// buffer, the column sums, the two row sums (PartialSums), and gx, which recomputes x̂ and ĝ with
// the same float ops (the same values). A missing weight is ones (g * 1 is g exactly); the column
// sums run when gw or gb is wanted (the other one then a scratch sum).
template <typename T>
__attribute__((always_inline)) inline void LayerNormBackwardRows(const T* g, const T* x, const T* mean, const T* rstd,
                                                                  const T* w, T* gx, T* gw, T* gb, int64_t rows,
                                                                  int64_t D) {
  std::vector<double> accW(D, 0.0), accB(D, 0.0);
  std::vector<T> buf(3 * static_cast<size_t>(D)), ones(w ? 0 : D, T(1));
  T* ghat = buf.data();
  T* prod = ghat + D;  // ĝ x̂
  T* gxh = prod + D;   // g x̂
  const T* wv = w ? w : ones.data();
  double* aw = accW.data();
  double* ab = accB.data();
  for (int64_t r = 0; r < rows; ++r) {
    const T* gr = g + r * D;
    const T* xr = x + r * D;
    const T mu = mean[r], rs = rstd[r];
    for (int64_t j = 0; j < D; ++j) {
      const T xh = (xr[j] - mu) * rs;
      const T gh = gr[j] * wv[j];
      ghat[j] = gh;
      prod[j] = gh * xh;
      gxh[j] = gr[j] * xh;
    }
    if (gw || gb)
      for (int64_t j = 0; j < D; ++j) {
        aw[j] += static_cast<double>(gxh[j]);
        ab[j] += static_cast<double>(gr[j]);
      }
    if (!gx) continue;
    // NB: the sums are rounded to T before the division, as the composite's float reductions are.
    const T m1 = static_cast<T>(PartialSums(ghat, D)) / static_cast<T>(D);
    const T m2 = static_cast<T>(PartialSums(prod, D)) / static_cast<T>(D);
    // NB: gx may be g itself: every read of this row's g above is done
    T* out = gx + r * D;
    for (int64_t j = 0; j < D; ++j) out[j] = ((ghat[j] - m1) - ((xr[j] - mu) * rs) * m2) * rs;
  }
  for (int64_t j = 0; gw && j < D; ++j) gw[j] = static_cast<T>(accW[j]);
  for (int64_t j = 0; gb && j < D; ++j) gb[j] = static_cast<T>(accB[j]);
}

// The float32 rows twice, as AdamF32. 512 rows of 128 on this project's AMD EPYC: 113 us with one
// running sum per row, 62 us with the loops above on SSE2, 40 us with AVX2.
TPRPC_AVX2_CLONES void LayerNormBackwardF32(const float* g, const float* x, const float* mean, const float* rstd,
                                            const float* w, float* gx, float* gw, float* gb, int64_t rows,
                                            int64_t D) {
  LayerNormBackwardRows<float>(g, x, mean, rstd, w, gx, gw, gb, rows, D);
}

// layerNormBackward(g, x, mean, rstd, weight|null, gx|null, gw|null, gb|null): g and x contiguous
// [rows, D]; mean and rstd [rows]; weight, gw and gb [D]; one float dtype. Null outputs are skipped.
Napi::Value LayerNormBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  View g = ParseView(info[0], "g"), x = ParseView(info[1], "x");
  if (x.dtype != DType::F32 && x.dtype != DType::F64) ThrowType(env, "layerNormBackward: x must be float32 or float64");
  if (x.ndim() < 1 || !x.contiguous() || !g.contiguous() || g.numel() != x.numel() || g.dtype != x.dtype)
    ThrowType(env, "layerNormBackward: g and x must be contiguous [rows, D] of one dtype");
  const int64_t D = x.shape.back(), rows = D ? x.numel() / D : 0;
  auto optional = [&](size_t i, const char* what, int64_t len) -> void* {
    if (info[i].IsNull() || info[i].IsUndefined()) return nullptr;
    View t = ParseView(info[i], what);
    if (t.dtype != x.dtype || t.numel() != len || !t.contiguous())
      ThrowType(env, std::string("layerNormBackward: ") + what + " must be a contiguous tensor of x's dtype with " +
                         std::to_string(len) + " elements");
    return static_cast<uint8_t*>(t.data) + t.offset * ItemSize(t.dtype);
  };
  void* mean = optional(2, "mean", rows);
  void* rstd = optional(3, "rstd", rows);
  if (!mean || !rstd) ThrowType(env, "layerNormBackward: mean and rstd are required");
  void* w = optional(4, "weight", D);
  void* gx = optional(5, "gx", rows * D);
  void* gw = optional(6, "gw", D);
  void* gb = optional(7, "gb", D);
  if (x.dtype == DType::F32)
    LayerNormBackwardF32(g.ptr<float>(), x.ptr<float>(), static_cast<float*>(mean), static_cast<float*>(rstd),
                         static_cast<float*>(w), static_cast<float*>(gx), static_cast<float*>(gw),
                         static_cast<float*>(gb), rows, D);
  else
    LayerNormBackwardRows<double>(g.ptr<double>(), x.ptr<double>(), static_cast<double*>(mean),
                                  static_cast<double*>(rstd), static_cast<double*>(w), static_cast<double*>(gx),
                                  static_cast<double*>(gw), static_cast<double*>(gb), rows, D);
  return env.Undefined();
}


// (log-)softmax backward along the last dim of contiguous [rows, n] views, y the forward's output:
//   softmax:     gx = y (g - Σ g y)
//   logSoftmax:  gx = g - exp(y) Σ g
// The row sums accumulate in float64 and are rounded to T, as the composite's float reductions.
template <typename T>
__attribute__((always_inline)) inline void SoftmaxBackwardRows(const T* y, const T* g, T* gx, int64_t rows, int64_t n,
                                                               bool log) {
  std::vector<T> prod(log ? 0 : n);
  for (int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * n;
    const T* gr = g + r * n;
    T* o = gx + r * n;
    if (log) {
      const T s = static_cast<T>(PartialSums(gr, n));
      for (int64_t j = 0; j < n; ++j) o[j] = gr[j] - static_cast<T>(std::exp(yr[j])) * s;
    } else {
      T* p = prod.data();
      for (int64_t j = 0; j < n; ++j) p[j] = gr[j] * yr[j];
      const T dot = static_cast<T>(PartialSums(p, n));
      for (int64_t j = 0; j < n; ++j) o[j] = yr[j] * (gr[j] - dot);
    }
  }
}

// The float32 rows twice, as AdamF32: [8, 4, 64, 64] 68 us on SSE2 with one running sum per row, 28 us.
TPRPC_AVX2_CLONES void SoftmaxBackwardF32(const float* y, const float* g, float* gx, int64_t rows, int64_t n,
                                          bool log) {
  SoftmaxBackwardRows<float>(y, g, gx, rows, n, log);
}

// softmaxBackward(y, g, log, gx): y, g and gx contiguous, one float dtype and shape; along the last dim.
Napi::Value SoftmaxBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  View y = ParseView(info[0], "y"), g = ParseView(info[1], "g");
  const bool log = info[2].ToBoolean().Value();
  View gx = ParseView(info[3], "gx");
  if (y.dtype != DType::F32 && y.dtype != DType::F64) ThrowType(env, "softmaxBackward: y must be float32 or float64");
  for (const View* t : {&g, &gx})
    if (t->dtype != y.dtype || t->shape != y.shape || !t->contiguous() || !y.contiguous())
      ThrowType(env, "softmaxBackward: y, g and gx must be contiguous with one dtype and shape");
  const int64_t n = y.ndim() ? y.shape.back() : 1, rows = n ? y.numel() / n : 0;
  if (y.dtype == DType::F32)
    SoftmaxBackwardF32(y.ptr<float>(), g.ptr<float>(), gx.ptr<float>(), rows, n, log);
  else
    SoftmaxBackwardRows<double>(y.ptr<double>(), g.ptr<double>(), gx.ptr<double>(), rows, n, log);
  return env.Undefined();
}

// geluBackward(x, g, tanh, out): out = g * gelu'(x) over contiguous float32 views of one element count, in one
// pass (vmath geluBackward): the numbers of unary geluGrad (geluTanhGrad) followed by a multiply by g, without
// the derivative's tensor. GELU's backward in a GPT block: two passes over [8, 64, 512] were ~0.6 ms.
Napi::Value GeluBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  View x = ParseView(info[0], "x"), g = ParseView(info[1], "g");
  const bool tanh = info[2].ToBoolean().Value();
  View out = ParseView(info[3], "out");
  const int64_t n = x.numel();
  for (const View* t : {&x, &g, &out})
    if (t->dtype != DType::F32 || t->numel() != n || !t->contiguous())
      ThrowType(env, "geluBackward: x, g and out must be contiguous float32 views of one element count");
  const float* px = x.ptr<float>();
  const float* pg = g.ptr<float>();
  float* po = out.ptr<float>();
  const vmath::F32Kernels& vk = vmath::F32();
  ParallelFor(n, kGrain / 4, [&](int64_t b, int64_t e) { vk.geluBackward(px + b, pg + b, po + b, e - b, tanh); });
  return env.Undefined();
}

}  // namespace
}  // namespace kern

void RegisterFused(Napi::Env env, Napi::Object exports) {
  exports.Set("geluBackward", Napi::Function::New(env, kern::GeluBackward));
  exports.Set("adamStep", Napi::Function::New(env, kern::AdamStep));
  exports.Set("sgdStep", Napi::Function::New(env, kern::SgdStep));
  exports.Set("layerNormBackward", Napi::Function::New(env, kern::LayerNormBackward));
  exports.Set("softmaxBackward", Napi::Function::New(env, kern::SoftmaxBackward));
}

}  // namespace tprpc
