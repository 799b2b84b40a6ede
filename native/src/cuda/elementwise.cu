// Elementwise kernels: copy with cast, fill, unary and binary ops, where.
// Every view is strided (broadcast dims have stride 0); out is contiguous
// except for copy and fill, whose destination may be any view. One kernel per
// compute dtype: _f32, _f64, _i32, _i64, _u8 (uint8 and bool). Op codes are
// kern::UOp / kern::BOp (native/src/kernels/ops.h), as the CPU kernels use.
#include "cuda/kcommon.cuh"
#include "cuda/params.h"
#include "kernels/ops.h"

using namespace tprpc::cuda;
using tprpc::kern::BOp;
using tprpc::kern::UOp;


namespace {

template <typename T>
struct IsFloat {
  static constexpr bool value = false;
};
template <>
struct IsFloat<float> {
  static constexpr bool value = true;
};
template <>
struct IsFloat<double> {
  static constexpr bool value = true;
};

constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327;
constexpr double kSqrt2OverPi = 0.7978845608028654;

template <typename T>
__device__ T UnaryFloat(int op, T x, double s0, double s1) {
  const T one = static_cast<T>(1), zero = static_cast<T>(0), half = static_cast<T>(0.5);
  switch (static_cast<UOp>(op)) {
    case UOp::Neg: return -x;
    case UOp::Exp: return Exp(x);
    case UOp::Log: return Log(x);
    case UOp::Sqrt: return Sqrt(x);
    case UOp::Rsqrt: return one / Sqrt(x);
    case UOp::Abs: return x < zero ? -x : (x == zero ? zero : x);
    case UOp::Sign: return x > zero ? one : x < zero ? -one : x == zero ? zero : x;
    case UOp::Tanh: return tanh(x);
    case UOp::Sigmoid: return x >= zero ? one / (one + Exp(-x)) : Exp(x) / (one + Exp(x));
    case UOp::Relu: return x > zero ? x : (x != x ? x : zero);
    case UOp::Gelu: return half * x * (one + erf(x * static_cast<T>(kInvSqrt2)));
    case UOp::GeluTanh:
      return half * x * (one + tanh(static_cast<T>(kSqrt2OverPi) * (x + static_cast<T>(0.044715) * x * x * x)));
    case UOp::GeluGrad:
      return half * (one + erf(x * static_cast<T>(kInvSqrt2))) +
             x * static_cast<T>(kInvSqrt2Pi) * Exp(-half * x * x);
    case UOp::GeluTanhGrad: {
      const T inner = static_cast<T>(kSqrt2OverPi) * (x + static_cast<T>(0.044715) * x * x * x);
      const T t = tanh(inner);
      const T dinner = static_cast<T>(kSqrt2OverPi) * (one + static_cast<T>(3 * 0.044715) * x * x);
      return half * (one + t) + half * x * (one - t * t) * dinner;
    }
    case UOp::Erf: return erf(x);
    case UOp::Sin: return sin(x);
    case UOp::Cos: return cos(x);
    case UOp::Reciprocal: return one / x;
    case UOp::Square: return x * x;
    case UOp::Log1p: return log1p(x);
    case UOp::Expm1: return expm1(x);
    case UOp::Floor: return floor(x);
    case UOp::Ceil: return ceil(x);
    case UOp::Round: return rint(x);  // NB: the default rounding mode rounds half to even, as torch.round
    case UOp::LogicalNot: return x == zero ? one : zero;
    case UOp::Isnan: return x != x ? one : zero;
    case UOp::PowScalar:
      if (s0 == 2) return x * x;
      if (s0 == 0.5) return Sqrt(x);
      return pow(x, static_cast<T>(s0));
    case UOp::Clamp: {
      if (x != x) return x;
      T y = x;
      if (s0 == s0 && y < static_cast<T>(s0)) y = static_cast<T>(s0);
      if (s1 == s1 && y > static_cast<T>(s1)) y = static_cast<T>(s1);
      return y;
    }
    default: return x;
  }
}

// Integer and bool inputs: the ops the op layer sends them (float ops are cast to float first).
template <typename T>
__device__ T UnaryInt(int op, T x, double s0, double s1) {
  const T zero = static_cast<T>(0);
  switch (static_cast<UOp>(op)) {
    case UOp::Neg: return static_cast<T>(-x);
    case UOp::Abs: return x < zero ? static_cast<T>(-x) : x;
    case UOp::Sign: return static_cast<T>(x > zero ? 1 : x < zero ? -1 : 0);
    case UOp::Square: return static_cast<T>(x * x);
    case UOp::Relu: return x > zero ? x : zero;
    case UOp::LogicalNot: return static_cast<T>(x == zero ? 1 : 0);
    case UOp::Isnan: return zero;
    case UOp::Floor:
    case UOp::Ceil:
    case UOp::Round: return x;
    case UOp::Clamp: {
      T y = x;
      if (s0 == s0 && static_cast<double>(y) < s0) y = static_cast<T>(s0);
      if (s1 == s1 && static_cast<double>(y) > s1) y = static_cast<T>(s1);
      return y;
    }
    default: return static_cast<T>(UnaryFloat<double>(op, static_cast<double>(x), s0, s1));
  }
}

template <typename T>
__device__ void UnaryBody(const EwParams& p) {
  TPRPC_GRID_LOOP(i, p.n) {
    const T x = Ld<T>(p.a, Off(p.a, i));
    T y;
    if constexpr (IsFloat<T>::value) y = UnaryFloat<T>(p.op, x, p.s0, p.s1);
    else y = UnaryInt<T>(p.op, x, p.s0, p.s1);
    St<T>(p.out, Off(p.out, i), y);
  }
}

template <typename T>
__device__ T BinaryOp(int op, T a, T b) {
  switch (static_cast<BOp>(op)) {
    case BOp::Add: return a + b;
    case BOp::Sub: return a - b;
    case BOp::Mul: return a * b;
    case BOp::Div: return a / b;
    case BOp::Pow:
      if constexpr (IsFloat<T>::value) return static_cast<T>(pow(static_cast<double>(a), static_cast<double>(b)));
      return static_cast<T>(trunc(pow(static_cast<double>(a), static_cast<double>(b))));
    case BOp::Maximum: return a != a || b != b ? (a != a ? a : b) : a > b ? a : b;
    case BOp::Minimum: return a != a || b != b ? (a != a ? a : b) : a < b ? a : b;
    case BOp::Eq: return static_cast<T>(a == b);
    case BOp::Ne: return static_cast<T>(a != b);
    case BOp::Lt: return static_cast<T>(a < b);
    case BOp::Le: return static_cast<T>(a <= b);
    case BOp::Gt: return static_cast<T>(a > b);
    case BOp::Ge: return static_cast<T>(a >= b);
    case BOp::LogicalAnd: return static_cast<T>(a != static_cast<T>(0) && b != static_cast<T>(0));
    case BOp::LogicalOr: return static_cast<T>(a != static_cast<T>(0) || b != static_cast<T>(0));
    default: return a;
  }
}

template <typename T>
__device__ void BinaryBody(const EwParams& p) {
  TPRPC_GRID_LOOP(i, p.n) {
    const T a = Ld<T>(p.a, Off(p.a, i));
    const T b = Ld<T>(p.b, Off(p.b, i));
    St<T>(p.out, Off(p.out, i), BinaryOp<T>(p.op, a, b));
  }
}

template <typename T>
__device__ void WhereBody(const EwParams& p) {
  TPRPC_GRID_LOOP(i, p.n) {
    const bool c = Ld<int>(p.c, Off(p.c, i)) != 0;
    St<T>(p.out, Off(p.out, i), c ? Ld<T>(p.a, Off(p.a, i)) : Ld<T>(p.b, Off(p.b, i)));
  }
}

// Contiguous float32 views, 16-byte aligned (ops.cc checks): four elements per load and store, the
// n % 4 last ones one by one. b_scalar: b is one element, broadcast. Unary when kBinary is false.
template <bool kBinary>
__device__ void VecBody(const EwParams& p) {
  const float* a = reinterpret_cast<const float*>(p.a.ptr) + p.a.offset;
  const float* b = kBinary ? reinterpret_cast<const float*>(p.b.ptr) + p.b.offset : nullptr;
  float* o = reinterpret_cast<float*>(p.out.ptr) + p.out.offset;
  const bool b_scalar = p.b_scalar != 0;
  const long long n4 = p.n / 4;
  const float4* a4 = reinterpret_cast<const float4*>(a);
  const float4* b4 = reinterpret_cast<const float4*>(b);
  float4* o4 = reinterpret_cast<float4*>(o);
  TPRPC_GRID_LOOP(i, n4) {
    const float4 x = a4[i];
    float4 y;
    if (kBinary) {
      float4 z;
      if (b_scalar) z.x = z.y = z.z = z.w = b[0];
      else z = b4[i];
      y.x = BinaryOp<float>(p.op, x.x, z.x);
      y.y = BinaryOp<float>(p.op, x.y, z.y);
      y.z = BinaryOp<float>(p.op, x.z, z.z);
      y.w = BinaryOp<float>(p.op, x.w, z.w);
    } else {
      y.x = UnaryFloat<float>(p.op, x.x, p.s0, p.s1);
      y.y = UnaryFloat<float>(p.op, x.y, p.s0, p.s1);
      y.z = UnaryFloat<float>(p.op, x.z, p.s0, p.s1);
      y.w = UnaryFloat<float>(p.op, x.w, p.s0, p.s1);
    }
    o4[i] = y;
  }
  TPRPC_GRID_LOOP(t, p.n - 4 * n4) {
    const long long i = 4 * n4 + t;
    if (kBinary) o[i] = BinaryOp<float>(p.op, a[i], b[b_scalar ? 0 : i]);
    else o[i] = UnaryFloat<float>(p.op, a[i], p.s0, p.s1);
  }
}

// copy: T is the destination's type (double for bool, so that 0.5 is true).
template <typename T>
__device__ void CopyBody(const EwParams& p) {
  TPRPC_GRID_LOOP(i, p.n) { St<T>(p.out, Off(p.out, i), Ld<T>(p.a, Off(p.a, i))); }
}

}  // namespace

#define TPRPC_EW_KERNELS(suffix, T)                                              \
  TPRPC_KERNEL(tk_unary_##suffix, EwParams, false) { UnaryBody<T>(p); }          \
  TPRPC_KERNEL(tk_binary_##suffix, EwParams, false) { BinaryBody<T>(p); }        \
  TPRPC_KERNEL(tk_where_##suffix, EwParams, false) { WhereBody<T>(p); }          \
  TPRPC_KERNEL(tk_copy_##suffix, EwParams, false) { CopyBody<T>(p); }

TPRPC_EW_KERNELS(f32, float)
TPRPC_KERNEL(tk_binary_f32_vec, EwParams, false) { VecBody<true>(p); }
TPRPC_KERNEL(tk_unary_f32_vec, EwParams, false) { VecBody<false>(p); }
TPRPC_EW_KERNELS(f64, double)
TPRPC_EW_KERNELS(i32, int)
TPRPC_EW_KERNELS(i64, long long)
TPRPC_EW_KERNELS(u8, unsigned char)

// Copies into a bool destination (nonzero, NaN included, is true).
TPRPC_KERNEL(tk_copy_bool, EwParams, false) { CopyBody<double>(p); }

// Sets every element of out to s0 (cast to out's dtype).
TPRPC_KERNEL(tk_fill, EwParams, false) {
  TPRPC_GRID_LOOP(i, p.n) {
    if (p.out.dtype == kI64) St<long long>(p.out, Off(p.out, i), static_cast<long long>(p.s0));
    else St<double>(p.out, Off(p.out, i), p.s0);
  }
}
