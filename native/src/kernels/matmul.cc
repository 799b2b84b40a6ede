// Batched matmul, out[...,M,N] = a[...,M,K] @ b[...,K,N], through the statically
// linked OpenBLAS (cblas_sgemm / cblas_dgemm). The batch dims may have any
// strides (each matrix is located by its own offset, so a head-split view
// such as [B, heads, T, hs] of a [B, T, 3C] projection needs no copy). A view whose matrix is
// row-major with padded rows goes in as is (leading dimension), a transposed
// contiguous one with the transpose flag, and anything else (zero or odd
// strides) is copied to a contiguous buffer first. A broadcast batch dim
// (size 1 or stride 0) needs no copy. Integer dtypes take a plain float64 loop, as
// the reference does.
// Threads: everything runs on the JS thread; OpenBLAS splits each call over
// its own pthreads pool, sized to NumThreads(). NB: sgemm is never called
// from inside ParallelFor, so the two pools never nest.
#include <cblas.h>

#include <atomic>
#include <cstring>

#include "kernels/common.h"
#include "kernels/kernels.h"

namespace tprpc {
namespace kern {
namespace {

// How one operand's [rows, cols] matrices are handed to BLAS.
struct MatArg {
  CBLAS_TRANSPOSE trans = CblasNoTrans;
  int64_t ld = 0;          // leading dimension of the stored matrix
  bool copy = false;        // needs a contiguous copy first
};

MatArg Classify(const View& v) {
  const int r = v.ndim();
  const int64_t rows = v.shape[r - 2], cols = v.shape[r - 1];
  // NB: strides of size-1 dims carry no information; pick the ones that make the matrix contiguous.
  const int64_t rs = rows == 1 ? std::max<int64_t>(cols, 1) : v.strides[r - 2];
  const int64_t cs = cols == 1 ? 1 : v.strides[r - 1];
  MatArg m;
  if (cs == 1 && rs >= std::max<int64_t>(cols, 1)) {
    m.ld = rs;
  } else if ((rs == 1 || rows == 1) && (cols == 1 ? true : cs >= std::max<int64_t>(rows, 1))) {
    m.trans = CblasTrans;  // stored as [cols, rows] row-major
    m.ld = cols == 1 ? std::max<int64_t>(rows, 1) : cs;
  } else {
    m.copy = true;
  }
  return m;
}

// The element offset of each matrix of v, for the batch dims of `out` (all but the last two) in
// row-major order; v's batch dims are out's or 1 (broadcast), any strides.
std::vector<int64_t> BatchOffsets(const View& v, const View& out) {
  const int nb = out.ndim() - 2;
  int64_t B = 1;
  for (int d = 0; d < nb; ++d) B *= out.shape[d];
  std::vector<int64_t> offs(B), idx(nb, 0);
  int64_t off = v.offset;
  for (int64_t i = 0; i < B; ++i) {
    offs[i] = off;
    for (int d = nb - 1; d >= 0; --d) {  // odometer
      const int64_t st = v.shape[d] == 1 ? 0 : v.strides[d];
      if (++idx[d] < out.shape[d]) {
        off += st;
        break;
      }
      off -= (idx[d] - 1) * st;
      idx[d] = 0;
    }
  }
  return offs;
}

// Copies the matrix of v that starts at element `off` into dst (rows x cols, contiguous).
template <typename T>
void Pack(const View& v, int64_t off, T* dst) {
  const int r = v.ndim();
  const int64_t rows = v.shape[r - 2], cols = v.shape[r - 1], rs = v.strides[r - 2], cs = v.strides[r - 1];
  const T* src = static_cast<const T*>(v.data) + off;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[i * cols + j] = src[i * rs + j * cs];
}

void SyncBlasThreads() {
  static std::atomic<int> current{0};  // NB: worker_threads may call matmul too
  const int n = NumThreads();
  if (current.exchange(n) != n) openblas_set_num_threads(n);
}

template <typename T>
void Gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
          int64_t ldb, T* C, bool accumulate) {
  if constexpr (std::is_same<T, float>::value)
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, accumulate ? 1.0f : 0.0f, C, N);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, A, lda, B, ldb, accumulate ? 1.0 : 0.0, C, N);
}

template <typename T>
void MatmulBlas(const View& a, const View& b, const View& out, bool accumulate) {
  const int r = out.ndim();
  const int64_t M = out.shape[r - 2], N = out.shape[r - 1], K = a.shape[r - 1], B = out.numel() / (M * N);
  T* c = static_cast<T*>(out.data) + out.offset;
  if (K == 0) {
    if (!accumulate) std::memset(c, 0, sizeof(T) * B * M * N);
    return;
  }
  const MatArg ma = Classify(a), mb = Classify(b);
  const std::vector<int64_t> offA = BatchOffsets(a, out), offB = BatchOffsets(b, out);
  std::vector<T> pa(ma.copy ? M * K : 0), pb(mb.copy ? K * N : 0);
  SyncBlasThreads();
  for (int64_t bi = 0; bi < B; ++bi) {
    const T* A;
    const T* Bm;
    if (ma.copy) {
      if (bi == 0 || offA[bi] != offA[bi - 1]) Pack<T>(a, offA[bi], pa.data());
      A = pa.data();
    } else {
      A = static_cast<const T*>(a.data) + offA[bi];
    }
    if (mb.copy) {
      if (bi == 0 || offB[bi] != offB[bi - 1]) Pack<T>(b, offB[bi], pb.data());
      Bm = pb.data();
    } else {
      Bm = static_cast<const T*>(b.data) + offB[bi];
    }
    Gemm<T>(ma.copy ? CblasNoTrans : ma.trans, mb.copy ? CblasNoTrans : mb.trans, M, N, K, A, ma.copy ? K : ma.ld,
            Bm, mb.copy ? N : mb.ld, c + bi * M * N, accumulate);
  }
}

// Integer dtypes: the reference's float64 accumulation, then the integer store.
template <typename T>
void MatmulLoop(const View& a, const View& b, const View& out, bool accumulate) {
  const int r = out.ndim();
  const int64_t M = out.shape[r - 2], N = out.shape[r - 1], K = a.shape[r - 1], B = out.numel() / (M * N);
  const int64_t ars = a.strides[r - 2], acs = a.strides[r - 1], brs = b.strides[r - 2], bcs = b.strides[r - 1];
  T* c = static_cast<T*>(out.data) + out.offset;
  const std::vector<int64_t> offA = BatchOffsets(a, out), offB = BatchOffsets(b, out);
  std::vector<double> row(N);
  for (int64_t bi = 0; bi < B; ++bi) {
    const T* ab = static_cast<const T*>(a.data) + offA[bi];
    const T* bb = static_cast<const T*>(b.data) + offB[bi];
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) row[j] = accumulate ? static_cast<double>(c[(bi * M + i) * N + j]) : 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double aik = static_cast<double>(ab[i * ars + k * acs]);
        for (int64_t j = 0; j < N; ++j) row[j] += aik * static_cast<double>(bb[k * brs + j * bcs]);
      }
      for (int64_t j = 0; j < N; ++j) c[(bi * M + i) * N + j] = Cast<T>(row[j]);
    }
  }
}

// matmul(a, b, out, accumulate?): out = a @ b, or out += a @ b (BLAS beta = 1) when accumulate
Napi::Value Matmul(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  View a = ParseView(info[0], "a"), b = ParseView(info[1], "b"), out = ParseView(info[2], "out");
  const int r = out.ndim();
  if (r < 3 || a.ndim() != r || b.ndim() != r) ThrowType(env, "matmul: a, b and out must have one rank >= 3");
  const int64_t M = out.shape[r - 2], N = out.shape[r - 1], K = a.shape[r - 1];
  bool ok = a.shape[r - 2] == M && b.shape[r - 2] == K && b.shape[r - 1] == N;
  for (int d = 0; d < r - 2; ++d)
    ok = ok && (a.shape[d] == out.shape[d] || a.shape[d] == 1) && (b.shape[d] == out.shape[d] || b.shape[d] == 1);
  if (!ok) ThrowType(env, "matmul: shapes do not match a [..., M, K] @ b [..., K, N] -> out [..., M, N]");
  if (a.dtype != b.dtype || a.dtype != out.dtype) ThrowType(env, "matmul: a, b and out must share a dtype");
  if (!out.contiguous()) ThrowType(env, "matmul: out must be contiguous");
  const bool accumulate = info.Length() > 3 && info[3].ToBoolean().Value();
  if (out.numel() == 0) return env.Undefined();
  switch (a.dtype) {
    case DType::F32: MatmulBlas<float>(a, b, out, accumulate); break;
    case DType::F64: MatmulBlas<double>(a, b, out, accumulate); break;
    case DType::I32: MatmulLoop<int32_t>(a, b, out, accumulate); break;
    case DType::I64: MatmulLoop<int64_t>(a, b, out, accumulate); break;
    case DType::U8: MatmulLoop<uint8_t>(a, b, out, accumulate); break;
  }
  return env.Undefined();
}

// setBlasThreads(n): OpenBLAS's own pool size (matmul also resets it to getNumThreads() when that changes).
Napi::Value SetBlasThreads(const Napi::CallbackInfo& info) {
  openblas_set_num_threads(static_cast<int>(IntArg(info, 0, "setBlasThreads", "n")));
  return info.Env().Undefined();
}

Napi::Value GetBlasThreads(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), openblas_get_num_threads());
}

}  // namespace
}  // namespace kern

void RegisterMatmul(Napi::Env env, Napi::Object exports) {
  exports.Set("matmul", Napi::Function::New(env, kern::Matmul));
  exports.Set("setBlasThreads", Napi::Function::New(env, kern::SetBlasThreads));
  exports.Set("getBlasThreads", Napi::Function::New(env, kern::GetBlasThreads));
}

}  // namespace tprpc
