// Vectorized float32 routines over contiguous arrays, built three times from
// one body (vmath_body.inc): for AVX-512F, for AVX2+FMA, and a portable
// one-lane build. The widest the CPU supports is chosen on first use
// (__builtin_cpu_supports); tests can force a narrower one. The math
// (exp, log, tanh, sigmoid, erf and the GELU forms) is our own range
// reduction plus polynomials fitted by tools/fit_vmath.py, accurate to about
// 1-3 ulp. Every function is thread-safe and runs on the caller's thread.
#pragma once
#include <cstdint>

#include "ops.h"

namespace tprpc {
namespace vmath {

struct F32Kernels {
  const char* isa;
  // y[i] = op(x[i]) for the ops FloatUnaryVectorized() accepts; y may equal x.
  void (*unary)(kern::UOp op, const float* x, float* y, int64_t n, float a0, float a1);
  // y[i] = a[i*sa] op b[i*sb] with sa, sb in {0, 1}, for add/sub/mul/div/maximum/minimum.
  void (*binary)(kern::BOp op, const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t n);
  // Largest / smallest element ignoring NaN (-inf / +inf when none); *nan set when any is NaN.
  float (*max)(const float* x, int64_t n, bool* nan);
  float (*min)(const float* x, int64_t n, bool* nan);
  // Sum of x, and of (x - shift)^2, accumulated in float64.
  double (*sum)(const float* x, int64_t n);
  double (*sumSqDev)(const float* x, int64_t n, float shift);
  // acc[j] += x[j] in float64 (column sums).
  void (*accumulate)(const float* x, double* acc, int64_t n);
  // y[i] = exp(x[i] - shift); returns the float64 sum of the y[i].
  double (*expShiftSum)(const float* x, float* y, int64_t n, float shift);
  // y[i] = (x[i] - a) - b (log-softmax's last step).
  void (*subShift)(const float* x, float* y, int64_t n, float a, float b);
  // y[i] *= s.
  void (*scale)(float* y, int64_t n, float s);
  // y[i] = (x[i] - mean) * rstd * (w ? w[i] : 1) + (b ? b[i] : 0).
  void (*normalize)(const float* x, float* y, int64_t n, float mean, float rstd, const float* w, const float* b);
  // Softmax (log: log-softmax) of a row of at most 4 vectors (64 floats with AVX-512) of x / divisor (1:
  // x itself), y may equal x; false (nothing done) for a longer row. The same math as a divide, then max,
  // expShiftSum and scale / subShift in turn.
  bool (*shortSoftmax)(const float* x, float* y, int64_t n, bool log, float divisor);
  // y[i] = g[i] * gelu'(x[i]) (tanh: the tanh form's), the derivative rounded to float first (unary
  // geluGrad, then a multiply, in one pass).
  void (*geluBackward)(const float* x, const float* g, float* y, int64_t n, bool tanh);
};

// Unary ops with a vector kernel (the others run scalar float64 math).
bool FloatUnaryVectorized(kern::UOp op, double a0);
bool FloatBinaryVectorized(kern::BOp op);

const F32Kernels& F32();

// "avx512", "avx2" or "scalar": what F32() uses now.
const char* IsaName();
// Forces an ISA no wider than the CPU supports; returns false when it is not available.
bool SetIsa(const char* name);

}  // namespace vmath
}  // namespace tprpc
