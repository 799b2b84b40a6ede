// The dispatch code of the CUDA kernel backend (sdk/tensor/backend/cuda/kernels.ts
// calls it): strided views in, kernel parameter structs and launch shapes out,
// then Launcher::Launch. The emulated device and a real one share all of it;
// only the launcher differs (launcher.h), so the emulated parity suite checks
// this file's indexing as much as the kernels'.
//
// A view travels from JS as { ptr: bigint (the storage's device address),
// offset, dtype (kcommon.cuh's DTypeCode), shape, strides } (elements).
// Thread: JS thread; every call launches and returns without waiting for the
// device (the copies back to the host wait), except the index ops, which read
// the error word back.
#include "cuda/ops.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>


#include "cuda/params.h"
#include "napi_bigint.h"

extern "C" void cblas_sgemm(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                            int);
extern "C" void cblas_dgemm(int, int, int, int, int, int, double, const double*, int, const double*, int, double,
                            double*, int);

namespace tprpc {
namespace cuda {

View ToView(const Napi::Value& value) {
  View v;
  std::memset(&v, 0, sizeof v);
  if (value.IsNull() || value.IsUndefined()) return v;  // ptr 0: absent
  auto o = value.As<Napi::Object>();
  v.ptr = BigIntU64(o.Get("ptr"));
  v.offset = o.Get("offset").As<Napi::Number>().Int64Value();
  v.dtype = o.Get("dtype").As<Napi::Number>().Int32Value();
  auto shape = o.Get("shape").As<Napi::Array>();
  auto strides = o.Get("strides").As<Napi::Array>();
  if (shape.Length() > static_cast<uint32_t>(kMaxDims))
    throw std::invalid_argument("CUDA kernels take at most " + std::to_string(kMaxDims) + " dims, got " +
                                std::to_string(shape.Length()));
  v.ndim = static_cast<int>(shape.Length());
  for (int d = 0; d < v.ndim; ++d) {
    v.shape[d] = shape.Get(static_cast<uint32_t>(d)).As<Napi::Number>().Int64Value();
    v.strides[d] = strides.Get(static_cast<uint32_t>(d)).As<Napi::Number>().Int64Value();
  }
  SetContig(v);
  return v;
}

void SetContig(View& v) {
  long long expect = 1;
  v.contig = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    if (v.shape[d] != 1 && v.strides[d] != expect) v.contig = 0;
    expect *= v.shape[d];
  }
  v.small = expect < 0x7fffffffLL ? 1 : 0;
}

long long Numel(const View& v) {
  long long n = 1;
  for (int d = 0; d < v.ndim; ++d) n *= v.shape[d];
  return n;
}

// v restricted to the dims for which keep(d) is true (same ptr, offset, dtype).
template <typename Keep>
View Sub(const View& v, Keep keep, bool zero_offset = false) {
  View s = v;
  s.ndim = 0;
  for (int d = 0; d < v.ndim; ++d)
    if (keep(d)) {
      s.shape[s.ndim] = v.shape[d];
      s.strides[s.ndim] = v.strides[d];
      ++s.ndim;
    }
  if (zero_offset) s.offset = 0;
  SetContig(s);
  return s;
}

// A contiguous view's elements as a flat [n] view.
View Flat(const View& v, long long n) {
  View f = v;
  f.ndim = 1;
  f.shape[0] = n;
  f.strides[0] = 1;
  f.contig = 1;
  return f;
}

namespace {

constexpr unsigned kThreads = 256;
constexpr long long kMaxGrid = 4096;

unsigned GridFor(long long n) {
  return static_cast<unsigned>(std::max<long long>(1, std::min<long long>((n + kThreads - 1) / kThreads, kMaxGrid)));
}
unsigned RowGrid(long long rows) { return static_cast<unsigned>(std::max<long long>(1, std::min(rows, kMaxGrid))); }
// Threads for rows of `size` elements: a power of two in [32, kMaxBlock].
unsigned RowBlock(long long size) {
  unsigned b = 32;
  while (b < static_cast<unsigned>(kMaxBlock) && static_cast<long long>(b) < size) b <<= 1;
  return b;
}

const char* Suffix(int dtype) {
  switch (dtype) {
    case kF32: return "f32";
    case kF64: return "f64";
    case kI32: return "i32";
    case kI64: return "i64";
    default: return "u8";
  }
}

bool IsFloatCode(int dtype) { return dtype == kF32 || dtype == kF64; }

// True when v is contiguous and its first element 16-byte aligned: the float4 kernels can take it.
bool Vec4(const View& v) {
  return v.contig != 0 && ((v.ptr + static_cast<unsigned long long>(v.offset) * 4) % 16) == 0;
}

// True when every element of v is its first one (a scalar broadcast: strides 0 or sizes 1).
bool OneElement(const View& v) {
  for (int d = 0; d < v.ndim; ++d)
    if (v.shape[d] != 1 && v.strides[d] != 0) return false;
  return true;
}

}  // namespace

Dispatcher::Dispatcher(std::unique_ptr<Launcher> launcher) : launcher_(std::move(launcher)) {
  // NB: the variable PyTorch users set to get CUDA errors at the op that caused them
  const char* blocking = std::getenv("CUDA_LAUNCH_BLOCKING");
  launch_blocking_ = blocking != nullptr && std::strcmp(blocking, "1") == 0;
}

template <typename P>
void Dispatcher::Run(int device, const std::string& name, unsigned grid, unsigned block, const P& p) {
  launcher_->Launch(device, name.c_str(), grid, block, &p, sizeof p);
}

void Dispatcher::Copy(int device, const View& src, const View& dst) {
  EwParams p{};
  p.a = src;
  p.out = dst;
  p.n = Numel(dst);
  if (p.n == 0) return;
  const std::string k = dst.dtype == kBool ? "tk_copy_bool" : std::string("tk_copy_") + Suffix(dst.dtype);
  Run(device, k, GridFor(p.n), kThreads, p);
}

void Dispatcher::Fill(int device, const View& dst, double value) {
  EwParams p{};
  p.out = dst;
  p.n = Numel(dst);
  p.s0 = value;
  if (p.n > 0) Run(device, "tk_fill", GridFor(p.n), kThreads, p);
}

void Dispatcher::Unary(int device, int op, const View& x, const View& out, double s0, double s1) {
  EwParams p{};
  p.a = x;
  p.out = out;
  p.op = op;
  p.s0 = s0;
  p.s1 = s1;
  p.n = Numel(out);
  if (p.n == 0) return;
  if (x.dtype == kF32 && out.dtype == kF32 && Vec4(x) && Vec4(out)) {
    Run(device, "tk_unary_f32_vec", GridFor((p.n + 3) / 4), kThreads, p);
    return;
  }
  Run(device, std::string("tk_unary_") + Suffix(x.dtype), GridFor(p.n), kThreads, p);
}

void Dispatcher::Binary(int device, int op, const View& a, const View& b, const View& out) {
  EwParams p{};
  p.a = a;
  p.b = b;
  p.out = out;
  p.op = op;
  p.n = Numel(out);
  if (p.n == 0) return;
  const bool b_scalar = b.dtype == kF32 && OneElement(b);
  if (a.dtype == kF32 && out.dtype == kF32 && Vec4(a) && Vec4(out) && (b_scalar || (b.dtype == kF32 && Vec4(b)))) {
    p.b_scalar = b_scalar ? 1 : 0;
    Run(device, "tk_binary_f32_vec", GridFor((p.n + 3) / 4), kThreads, p);
    return;
  }
  Run(device, std::string("tk_binary_") + Suffix(a.dtype), GridFor(p.n), kThreads, p);
}

void Dispatcher::Where(int device, const View& c, const View& a, const View& b, const View& out) {
  EwParams p{};
  p.c = c;
  p.a = a;
  p.b = b;
  p.out = out;
  p.n = Numel(out);
  if (p.n > 0) Run(device, std::string("tk_where_") + Suffix(out.dtype), GridFor(p.n), kThreads, p);
}

void Dispatcher::Reduce(int device, int op, const View& x, const std::vector<int>& dims, const View& out) {
  auto reduced = [&](int d) { return std::find(dims.begin(), dims.end(), d) != dims.end(); };
  ReduceParams p{};
  p.rows = Sub(x, [&](int d) { return !reduced(d); });
  p.red = Sub(x, reduced, true);
  p.nrows = Numel(p.rows);
  p.nred = Numel(p.red);
  p.out = Flat(out, p.nrows);
  p.op = op;
  if (p.nrows == 0) return;
  const bool fl = IsFloatCode(x.dtype) || IsFloatCode(out.dtype);
  Run(device, fl ? "tk_reduce_f" : "tk_reduce_i", RowGrid(p.nrows), RowBlock(p.nred), p);
}

RowParams Dispatcher::Rows(const View& a, int dim) {
  RowParams p{};
  p.a = Sub(a, [&](int d) { return d != dim; });
  p.as = a.ndim == 0 ? 1 : a.strides[dim];
  p.size = a.ndim == 0 ? 1 : a.shape[dim];
  p.nrows = Numel(p.a);
  return p;
}

void Dispatcher::ArgReduce(int device, bool argmin, const View& x, int dim, const View& out) {
  RowParams p = Rows(x, dim);
  p.out = Flat(out, p.nrows);
  p.log = argmin ? 1 : 0;
  if (p.nrows > 0) Run(device, "tk_argreduce", RowGrid(p.nrows), RowBlock(p.size), p);
}

void Dispatcher::Softmax(int device, const View& x, int dim, bool log, const View& out) {
  RowParams p = Rows(x, dim);
  RowParams o = Rows(out, dim);
  p.out = o.a;
  p.os = o.as;
  p.log = log ? 1 : 0;
  if (p.nrows > 0 && p.size > 0) Run(device, "tk_softmax", RowGrid(p.nrows), RowBlock(p.size), p);
}

void Dispatcher::MaskedSoftmax(int device, const View& x, const View& mask, double divisor, const View& out) {
  const long long s = x.shape[x.ndim - 1], t = x.shape[x.ndim - 2];
  RowParams p{};
  p.size = s;
  p.nrows = s == 0 ? 0 : Numel(x) / s;
  p.a = x;
  p.a.ndim = 1;
  p.a.shape[0] = p.nrows;
  p.a.strides[0] = s;
  SetContig(p.a);
  p.as = 1;
  p.out = out;
  p.out.ndim = 1;
  p.out.shape[0] = p.nrows;
  p.out.strides[0] = s;
  SetContig(p.out);
  p.os = 1;
  p.mask = mask;
  p.t = t;
  p.divisor = divisor;
  if (p.nrows > 0) Run(device, "tk_softmax", RowGrid(p.nrows), RowBlock(p.size), p);
}

void Dispatcher::SoftmaxBackward(int device, const View& y, const View& g, int dim, bool log, const View& out) {
  RowParams p = Rows(y, dim);
  RowParams gr = Rows(g, dim);
  RowParams o = Rows(out, dim);
  p.b = gr.a;
  p.bs = gr.as;
  p.out = o.a;
  p.os = o.as;
  p.log = log ? 1 : 0;
  if (p.nrows > 0 && p.size > 0) Run(device, "tk_softmax_backward", RowGrid(p.nrows), RowBlock(p.size), p);
}

void Dispatcher::IndexLaunched(int device) {
  if (index_pending_.size() <= static_cast<size_t>(device)) index_pending_.resize(device + 1, false);
  index_pending_[device] = true;
  if (launch_blocking_) CheckErrors(device);
}

void Dispatcher::CheckErrors(int device) {
  if (device < 0 || index_pending_.size() <= static_cast<size_t>(device) || !index_pending_[device]) return;
  index_pending_[device] = false;
  long long e[kErrorWords] = {};
  launcher_->TakeError(device, e);
  if (e[0] != 0)
    throw IndexOutOfRange("index " + std::to_string(e[1]) + " is out of bounds for dimension " + std::to_string(e[2]) +
                          " with size " + std::to_string(e[3]));
}

void Dispatcher::IndexSelect(int device, const View& x0, int dim, const View& index, const View& out0) {
  View x = x0, out = out0;
  if (x.ndim == 0) {  // NB: a 0-dim x indexes like a [1] one
    x.ndim = out.ndim = 1;
    x.shape[0] = 1;
    x.strides[0] = 1;
    out.shape[0] = Numel(index);
    out.strides[0] = 1;
  }
  IndexParams p{};
  p.x = x;
  p.index = index;
  p.out = out;
  p.n = Numel(out);
  p.dim = dim;
  p.size = x.shape[dim];
  p.inner = 1;
  for (int d = dim + 1; d < x.ndim; ++d) p.inner *= x.shape[d];
  p.err = launcher_->ErrorWord(device);
  if (p.n == 0) return;
  Run(device, "tk_index_select", GridFor(p.n), kThreads, p);
  IndexLaunched(device);
}

void Dispatcher::Gather(int device, const View& x, int dim, const View& index, const View& out) {
  IndexParams p{};
  p.x = x;
  p.index = index;
  p.out = out;
  p.n = Numel(index);
  p.dim = dim;
  p.size = x.ndim == 0 ? 1 : x.shape[dim];
  p.err = launcher_->ErrorWord(device);
  if (p.n == 0) return;
  Run(device, "tk_gather", GridFor(p.n), kThreads, p);
  IndexLaunched(device);
}

void Dispatcher::ScatterAdd(int device, const View& dst, int dim, const View& index, const View& src) {
  IndexParams p{};
  p.x = dst;
  p.index = index;
  p.src = src;
  p.n = Numel(index);
  p.dim = dim;
  p.size = dst.ndim == 0 ? 1 : dst.shape[dim];
  p.err = launcher_->ErrorWord(device);
  if (p.n == 0) return;
  if (dst.dtype != kF32 && dst.dtype != kF64 && dst.dtype != kI64 && dst.dtype != kI32)
    throw std::invalid_argument("scatterAdd on CUDA tensors takes float32, float64, int32 or int64");
  Run(device, "tk_scatter_add", GridFor(p.n), kThreads, p);
  IndexLaunched(device);
}

void Dispatcher::LayerNorm(int device, const View& x, const View& w, const View& b, double eps, const View& out,
                           const View& mean, const View& rstd) {
  NormParams p{};
  p.x = x;
  p.w = w;
  p.b = b;
  p.out = out;
  p.mean = mean;
  p.rstd = rstd;
  p.d = x.shape[x.ndim - 1];
  p.rows = p.d == 0 ? 0 : Numel(x) / p.d;
  p.eps = eps;
  if (p.rows > 0) Run(device, "tk_layer_norm", RowGrid(p.rows), RowBlock(p.d), p);
}

void Dispatcher::LayerNormBackward(int device, const View& g, const View& x, const View& mean, const View& rstd,
                                   const View& w, const View& gx, const View& gw, const View& gb) {
  NormParams p{};
  p.g = g;
  p.x = x;
  p.mean = mean;
  p.rstd = rstd;
  p.w = w;
  p.gx = gx;
  p.gw = gw;
  p.gb = gb;
  p.d = x.shape[x.ndim - 1];
  p.rows = p.d == 0 ? 0 : Numel(x) / p.d;
  if (p.rows == 0) return;
  if (gx.ptr) Run(device, "tk_layer_norm_backward_rows", RowGrid(p.rows), RowBlock(p.d), p);
  if (gw.ptr || gb.ptr) Run(device, "tk_layer_norm_backward_cols", GridFor(p.d), kThreads, p);
}

void Dispatcher::AdamStep(int device, const AdamParams& p) {
  if (p.n > 0) Run(device, p.p.dtype == kF32 ? "tk_adam_f32" : "tk_adam_f64", GridFor(p.n), kThreads, p);
}

// The one batch stride of v's batch dims (those before the last two) over out's batch shape, or
// -1 when they do not collapse to one (then the matmul kernel handles any strides).
static long long BatchStride(const View& v) {
  long long s = -1, acc = 1;
  for (int d = v.ndim - 3; d >= 0; --d) {
    if (v.shape[d] != 1) {
      if (s < 0) s = acc == 0 ? 0 : v.strides[d] / acc;
      if (v.strides[d] != s * acc) return -1;
    }
    acc *= v.shape[d];
  }
  return s < 0 ? 0 : s;
}

void Dispatcher::Matmul(int device, const View& a, const View& b, const View& out, bool accumulate) {
  const int r = out.ndim;
  MatmulParams p{};
  p.a = a;
  p.b = b;
  p.out = out;
  p.m = out.shape[r - 2];
  p.n = out.shape[r - 1];
  p.k = a.shape[r - 1];
  p.count = Numel(out);
  p.accumulate = accumulate ? 1 : 0;
  if (p.count == 0) return;
  const long long ba = BatchStride(a), bb = BatchStride(b);
  if (use_blas_ && p.k > 0 && ba >= 0 && bb >= 0 && (a.dtype == kF32 || a.dtype == kF64)) {
    GemmArgs g{};
    const size_t isz = a.dtype == kF32 ? 4 : 8;
    g.a = a.ptr + a.offset * isz;
    g.b = b.ptr + b.offset * isz;
    g.c = out.ptr + out.offset * isz;
    g.m = p.m;
    g.n = p.n;
    g.k = p.k;
    g.count = p.count / (p.m * p.n);
    // NB: a unit extent's stride is free; give it the value that makes the layout valid.
    g.a_rs = p.m == 1 ? std::max<long long>(p.k, 1) : a.strides[r - 2];
    g.a_cs = p.k == 1 ? 1 : a.strides[r - 1];
    g.b_rs = p.k == 1 ? std::max<long long>(p.n, 1) : b.strides[r - 2];
    g.b_cs = p.n == 1 ? 1 : b.strides[r - 1];
    if (g.a_cs != 1 && g.a_rs != 1) g.a_rs = 0;  // neither unit-stride: no BLAS layout
    g.batch_a = ba;
    g.batch_b = bb;
    g.dtype = a.dtype == kF32 ? 0 : 1;
    g.accumulate = accumulate;
    const bool layout = (g.a_cs == 1 || g.a_rs == 1) && (g.b_cs == 1 || g.b_rs == 1);
    if (layout && launcher_->Gemm(device, g)) return;
  }
  Run(device, "tk_matmul", GridFor(p.count), kThreads, p);
}

// ---- the emulated device's GEMM: OpenBLAS with the arguments a GPU gives cuBLAS ----------------------
bool EmulatedGemm(const GemmArgs& g) {
  constexpr int kColMajor = 102, kNoTrans = 111, kTrans = 112;
  const bool bn = g.b_cs == 1, an = g.a_cs == 1;
  const long long ldb = bn ? g.b_rs : g.b_cs, lda = an ? g.a_rs : g.a_cs;
  if (ldb < (bn ? g.n : g.k) || lda < (an ? g.k : g.m) || ldb < 1 || lda < 1) return false;
  const size_t isz = g.dtype == 0 ? 4 : 8;
  for (long long i = 0; i < g.count; ++i) {
    const unsigned long long a = g.a + i * g.batch_a * isz, b = g.b + i * g.batch_b * isz;
    const unsigned long long c = g.c + i * g.m * g.n * isz;
    if (g.dtype == 0)
      cblas_sgemm(kColMajor, bn ? kNoTrans : kTrans, an ? kNoTrans : kTrans, g.n, g.m, g.k, 1.f,
                  reinterpret_cast<const float*>(b), ldb, reinterpret_cast<const float*>(a), lda,
                  g.accumulate ? 1.f : 0.f, reinterpret_cast<float*>(c), g.n);
    else
      cblas_dgemm(kColMajor, bn ? kNoTrans : kTrans, an ? kNoTrans : kTrans, g.n, g.m, g.k, 1.,
                  reinterpret_cast<const double*>(b), ldb, reinterpret_cast<const double*>(a), lda,
                  g.accumulate ? 1. : 0., reinterpret_cast<double*>(c), g.n);
  }
  return true;
}

}  // namespace cuda
}  // namespace tprpc
