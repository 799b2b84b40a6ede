// Batched matmul, out[B,M,N] = a[B,M,K] @ b[B,K,N], through the statically
// linked OpenBLAS (cblas_sgemm / cblas_dgemm). A view whose matrix is
// row-major with padded rows goes in as is (leading dimension), a transposed
// contiguous one with the transpose flag, and anything else (zero or odd
// strides) is copied to a contiguous buffer first. A batch stride of 0
// (broadcast) needs no copy. Integer dtypes take a plain float64 loop, as
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
  int64_t batchStride = 0;  // elements between matrices (0: broadcast)
  bool copy = false;        // needs a contiguous copy first
};

MatArg Classify(const View& v) {
  const int64_t rows = v.shape[1], cols = v.shape[2];
  // NB: strides of size-1 dims carry no information; pick the ones that make the matrix contiguous.
  const int64_t rs = rows == 1 ? std::max<int64_t>(cols, 1) : v.strides[1];
  const int64_t cs = cols == 1 ? 1 : v.strides[2];
  MatArg m;
  m.batchStride = v.shape[0] == 1 ? 0 : v.strides[0];
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

// Copies matrix `bi` of v into dst (rows x cols, contiguous).
template <typename T>
void Pack(const View& v, int64_t bi, T* dst) {
  const int64_t rows = v.shape[1], cols = v.shape[2];
  const T* src = static_cast<const T*>(v.data) + v.offset + (v.shape[0] == 1 ? 0 : bi * v.strides[0]);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[i * cols + j] = src[i * v.strides[1] + j * v.strides[2]];
}

void SyncBlasThreads() {
  static std::atomic<int> current{0};  // NB: worker_threads may call matmul too
  const int n = NumThreads();
  if (current.exchange(n) != n) openblas_set_num_threads(n);
}

template <typename T>
void Gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
          int64_t ldb, T* C) {
  if constexpr (std::is_same<T, float>::value)
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, A, lda, B, ldb, 0.0, C, N);
}

template <typename T>
void MatmulBlas(const View& a, const View& b, const View& out) {
  const int64_t B = out.shape[0], M = out.shape[1], N = out.shape[2], K = a.shape[2];
  T* c = static_cast<T*>(out.data) + out.offset;
  if (K == 0) {
    std::memset(c, 0, sizeof(T) * B * M * N);
    return;
  }
  const MatArg ma = Classify(a), mb = Classify(b);
  std::vector<T> pa(ma.copy ? M * K : 0), pb(mb.copy ? K * N : 0);
  SyncBlasThreads();
  for (int64_t bi = 0; bi < B; ++bi) {
    const T* A;
    const T* Bm;
    if (ma.copy) {
      if (bi == 0 || ma.batchStride != 0) Pack<T>(a, bi, pa.data());
      A = pa.data();
    } else {
      A = static_cast<const T*>(a.data) + a.offset + bi * ma.batchStride;
    }
    if (mb.copy) {
      if (bi == 0 || mb.batchStride != 0) Pack<T>(b, bi, pb.data());
      Bm = pb.data();
    } else {
      Bm = static_cast<const T*>(b.data) + b.offset + bi * mb.batchStride;
    }
    Gemm<T>(ma.copy ? CblasNoTrans : ma.trans, mb.copy ? CblasNoTrans : mb.trans, M, N, K, A, ma.copy ? K : ma.ld,
            Bm, mb.copy ? N : mb.ld, c + bi * M * N);
  }
}

// Integer dtypes: the reference's float64 accumulation, then the integer store.
template <typename T>
void MatmulLoop(const View& a, const View& b, const View& out) {
  const int64_t B = out.shape[0], M = out.shape[1], N = out.shape[2], K = a.shape[2];
  T* c = static_cast<T*>(out.data) + out.offset;
  const T* pa = static_cast<const T*>(a.data) + a.offset;
  const T* pb = static_cast<const T*>(b.data) + b.offset;
  std::vector<double> row(N);
  for (int64_t bi = 0; bi < B; ++bi) {
    const T* ab = pa + (a.shape[0] == 1 ? 0 : bi * a.strides[0]);
    const T* bb = pb + (b.shape[0] == 1 ? 0 : bi * b.strides[0]);
    for (int64_t i = 0; i < M; ++i) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int64_t k = 0; k < K; ++k) {
        const double aik = static_cast<double>(ab[i * a.strides[1] + k * a.strides[2]]);
        for (int64_t j = 0; j < N; ++j) row[j] += aik * static_cast<double>(bb[k * b.strides[1] + j * b.strides[2]]);
      }
      for (int64_t j = 0; j < N; ++j) c[(bi * M + i) * N + j] = Cast<T>(row[j]);
    }
  }
}

// matmul(a, b, out)
Napi::Value Matmul(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  View a = ParseView(info[0], "a"), b = ParseView(info[1], "b"), out = ParseView(info[2], "out");
  if (a.ndim() != 3 || b.ndim() != 3 || out.ndim() != 3) ThrowType(env, "matmul: a, b and out must be 3-D [B, M, K]");
  const int64_t B = out.shape[0], M = out.shape[1], N = out.shape[2], K = a.shape[2];
  if (a.shape[1] != M || b.shape[1] != K || b.shape[2] != N || (a.shape[0] != B && a.shape[0] != 1) ||
      (b.shape[0] != B && b.shape[0] != 1))
    ThrowType(env, "matmul: shapes do not match a [B, M, K] @ b [B, K, N] -> out [B, M, N]");
  if (a.dtype != b.dtype || a.dtype != out.dtype) ThrowType(env, "matmul: a, b and out must share a dtype");
  if (!out.contiguous()) ThrowType(env, "matmul: out must be contiguous");
  if (out.numel() == 0) return env.Undefined();
  switch (a.dtype) {
    case DType::F32: MatmulBlas<float>(a, b, out); break;
    case DType::F64: MatmulBlas<double>(a, b, out); break;
    case DType::I32: MatmulLoop<int32_t>(a, b, out); break;
    case DType::I64: MatmulLoop<int64_t>(a, b, out); break;
    case DType::U8: MatmulLoop<uint8_t>(a, b, out); break;
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
