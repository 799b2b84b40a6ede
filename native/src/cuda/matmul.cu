// Batched matmul without cuBLAS: one thread per output element, float64
// accumulation (the reference backend's numerics). It serves the emulated
// device and a GPU where cuBLAS is missing; with cuBLAS the dispatch code calls
// its GEMMs instead (ops.cc). a [..., M, K], b [..., K, N] and out [..., M, N]
// share out's batch dims; a and b may have any strides (0 on broadcast dims).
#include "cuda/kcommon.cuh"
#include "cuda/params.h"

using namespace tprpc::cuda;


namespace {

// Storage offset of batch `bi`'s matrix in v (the batch dims are all but the last two).
__device__ __forceinline__ long long BatchBase(const View& v, long long bi) {
  long long off = v.offset;
  for (int d = v.ndim - 3; d >= 0; --d) {
    const long long s = v.shape[d];
    off += (bi % s) * v.strides[d];
    bi /= s;
  }
  return off;
}

}  // namespace

TPRPC_KERNEL(tk_matmul, MatmulParams, false) {
  const int r = p.out.ndim;
  const long long sam = p.a.strides[r - 2], sak = p.a.strides[r - 1];
  const long long sbk = p.b.strides[r - 2], sbn = p.b.strides[r - 1];
  TPRPC_GRID_LOOP(i, p.count) {
    const long long j = i % p.n, row = (i / p.n) % p.m, bi = i / (p.m * p.n);
    const long long ab = BatchBase(p.a, bi) + row * sam, bb = BatchBase(p.b, bi) + j * sbn;
    double acc = p.accumulate ? Ld<double>(p.out, p.out.offset + i) : 0;
    for (long long kk = 0; kk < p.k; ++kk) acc += Ld<double>(p.a, ab + kk * sak) * Ld<double>(p.b, bb + kk * sbk);
    St<double>(p.out, p.out.offset + i, acc);
  }
}
