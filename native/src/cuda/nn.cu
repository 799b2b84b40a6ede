// Layer norm (forward and backward), the index ops (indexSelect, gather,
// scatterAdd) and the fused Adam/AdamW step. Index kernels check every index
// and report the first bad one through the launcher's error word ({1, index,
// dim, size}); the dispatch code turns it into an IndexError at the next
// synchronization (ops.h, "Index errors").
#include "cuda/kcommon.cuh"
#include "cuda/params.h"

using namespace tprpc::cuda;




namespace {

// A bad index: records it in the error word unless an earlier one is there, and returns false.
__device__ __forceinline__ bool CheckIndex(unsigned long long err, long long& idx, long long dim, long long size) {
  if (idx < -size || idx >= size) {
    unsigned long long* flag = reinterpret_cast<unsigned long long*>(err);
    if (atomicCAS(flag, 0ULL, 1ULL) == 0ULL) {
      long long* e = reinterpret_cast<long long*>(err);
      e[1] = idx;
      e[2] = dim;
      e[3] = size;
    }
    return false;
  }
  if (idx < 0) idx += size;
  return true;
}

// Storage offset in x of out's element i whose coordinate along dim is replaced by idx: out and
// index share the shape (gather, scatterAdd), x has its own strides.
__device__ __forceinline__ long long Rebase(const View& shape_of, const View& x, long long i, long long dim,
                                            long long idx) {
  long long off = x.offset;
  for (int d = shape_of.ndim - 1; d >= 0; --d) {
    const long long s = shape_of.shape[d];
    off += (d == dim ? idx : i % s) * x.strides[d];
    i /= s;
  }
  return off;
}

template <typename T>
__device__ void AdamBody(const AdamParams& p) {
  const T decay = static_cast<T>(p.decay), l2 = static_cast<T>(p.l2), b1 = static_cast<T>(p.beta1),
          omb1 = static_cast<T>(p.omb1), b2 = static_cast<T>(p.beta2), omb2 = static_cast<T>(p.omb2),
          bc2 = static_cast<T>(p.bc2sqrt), eps = static_cast<T>(p.eps), negstep = static_cast<T>(p.negstep);
  T* pp = reinterpret_cast<T*>(p.p.ptr) + p.p.offset;
  const T* gp = reinterpret_cast<const T*>(p.g.ptr) + p.g.offset;
  T* mp = reinterpret_cast<T*>(p.m.ptr) + p.m.offset;
  T* vp = reinterpret_cast<T*>(p.v.ptr) + p.v.offset;
  T* xp = p.vmax.ptr ? reinterpret_cast<T*>(p.vmax.ptr) + p.vmax.offset : nullptr;
  TPRPC_GRID_LOOP(i, p.n) {
    T g = p.maximize ? -gp[i] : gp[i];
    T w = pp[i];
    if (p.decay != 1) w = w * decay;
    if (p.l2 != 0) g = g + w * l2;
    const T m = mp[i] * b1 + g * omb1;
    const T v = vp[i] * b2 + (g * g) * omb2;
    mp[i] = m;
    vp[i] = v;
    T den = v;
    if (xp) {
      den = xp[i] > v || xp[i] != xp[i] ? xp[i] : v;
      xp[i] = den;
    }
    pp[i] = w + (m / (Sqrt(den) / bc2 + eps)) * negstep;
  }
}

}  // namespace

TPRPC_KERNEL(tk_layer_norm, NormParams, true) {
  TPRPC_ROW_LOOP(r, p.rows) {
    const long long base = p.x.offset + r * p.d;
    double s = 0;
    TPRPC_THREAD_LOOP(k, p.d) s += Ld<double>(p.x, base + k);
    const double mean = BlockReduce(s, SumOp()) / static_cast<double>(p.d);
    double q = 0;
    TPRPC_THREAD_LOOP(k, p.d) {
      const double c = Ld<double>(p.x, base + k) - mean;
      q += c * c;
    }
    const double var = BlockReduce(q, SumOp()) / static_cast<double>(p.d);
    const double rstd = 1 / sqrt(var + p.eps);
    TPRPC_THREAD_LOOP(k, p.d) {
      double y = (Ld<double>(p.x, base + k) - mean) * rstd;
      if (p.w.ptr) y *= Ld<double>(p.w, Off(p.w, k));
      if (p.b.ptr) y += Ld<double>(p.b, Off(p.b, k));
      St<double>(p.out, p.out.offset + r * p.d + k, y);
    }
    if (threadIdx.x == 0) {
      St<double>(p.mean, Off(p.mean, r), mean);
      St<double>(p.rstd, Off(p.rstd, r), rstd);
    }
  }
}

// gx = rstd (ĝ - mean(ĝ) - x̂ mean(ĝ x̂)) per row, with x̂ = (x - mean) rstd and ĝ = g w.
TPRPC_KERNEL(tk_layer_norm_backward_rows, NormParams, true) {
  TPRPC_ROW_LOOP(r, p.rows) {
    const long long base = r * p.d;
    const double mean = Ld<double>(p.mean, Off(p.mean, r)), rstd = Ld<double>(p.rstd, Off(p.rstd, r));
    double sg = 0, sgx = 0;
    TPRPC_THREAD_LOOP(k, p.d) {
      const double xh = (Ld<double>(p.x, p.x.offset + base + k) - mean) * rstd;
      double gh = Ld<double>(p.g, p.g.offset + base + k);
      if (p.w.ptr) gh *= Ld<double>(p.w, Off(p.w, k));
      sg += gh;
      sgx += gh * xh;
    }
    const double mg = BlockReduce(sg, SumOp()) / static_cast<double>(p.d);
    const double mgx = BlockReduce(sgx, SumOp()) / static_cast<double>(p.d);
    TPRPC_THREAD_LOOP(k, p.d) {
      const double xh = (Ld<double>(p.x, p.x.offset + base + k) - mean) * rstd;
      double gh = Ld<double>(p.g, p.g.offset + base + k);
      if (p.w.ptr) gh *= Ld<double>(p.w, Off(p.w, k));
      St<double>(p.gx, p.gx.offset + base + k, rstd * (gh - mg - xh * mgx));
    }
  }
}

// gw = sum over rows of g x̂, gb = sum over rows of g: one thread per column.
TPRPC_KERNEL(tk_layer_norm_backward_cols, NormParams, false) {
  TPRPC_GRID_LOOP(k, p.d) {
    double sw = 0, sb = 0;
    for (long long r = 0; r < p.rows; ++r) {
      const double g = Ld<double>(p.g, p.g.offset + r * p.d + k);
      const double mean = Ld<double>(p.mean, Off(p.mean, r)), rstd = Ld<double>(p.rstd, Off(p.rstd, r));
      sw += g * (Ld<double>(p.x, p.x.offset + r * p.d + k) - mean) * rstd;
      sb += g;
    }
    if (p.gw.ptr) St<double>(p.gw, Off(p.gw, k), sw);
    if (p.gb.ptr) St<double>(p.gb, Off(p.gb, k), sb);
  }
}

// out (contiguous [outer, index.n, inner]) = x.indexSelect(dim, index).
TPRPC_KERNEL(tk_index_select, IndexParams, false) {
  const long long m = p.index.shape[0];
  TPRPC_GRID_LOOP(i, p.n) {
    const long long j = (i / p.inner) % m;
    long long idx = Ld<long long>(p.index, Off(p.index, j));
    if (!CheckIndex(p.err, idx, p.dim, p.size)) continue;
    // NB: out's coordinates are x's except along dim (Rebase with out's shape and x's strides).
    const long long off = Rebase(p.out, p.x, i, p.dim, idx);
    St<double>(p.out, p.out.offset + i, Ld<double>(p.x, off));
  }
}

// out (index's shape) = x.gather(dim, index).
TPRPC_KERNEL(tk_gather, IndexParams, false) {
  TPRPC_GRID_LOOP(i, p.n) {
    long long idx = Ld<long long>(p.index, Off(p.index, i));
    if (!CheckIndex(p.err, idx, p.dim, p.size)) continue;
    St<double>(p.out, p.out.offset + i, Ld<double>(p.x, Rebase(p.index, p.x, i, p.dim, idx)));
  }
}

// x[.., index[i], ..] += src[i] along dim, for every element i of index (atomic adds).
TPRPC_KERNEL(tk_scatter_add, IndexParams, false) {
  TPRPC_GRID_LOOP(i, p.n) {
    long long idx = Ld<long long>(p.index, Off(p.index, i));
    if (!CheckIndex(p.err, idx, p.dim, p.size)) continue;
    const long long dst = Rebase(p.index, p.x, i, p.dim, idx);
    const long long s = Rebase(p.index, p.src, i, -1, 0);
    if (p.x.dtype == kF32) {
      atomicAdd(reinterpret_cast<float*>(p.x.ptr) + dst, Ld<float>(p.src, s));
    } else if (p.x.dtype == kF64) {
      atomicAdd(reinterpret_cast<double*>(p.x.ptr) + dst, Ld<double>(p.src, s));
    } else if (p.x.dtype == kI64) {
      atomicAdd(reinterpret_cast<unsigned long long*>(p.x.ptr) + dst,
                static_cast<unsigned long long>(Ld<long long>(p.src, s)));
    } else if (p.x.dtype == kI32) {
      atomicAdd(reinterpret_cast<int*>(p.x.ptr) + dst, Ld<int>(p.src, s));
    }
  }
}

TPRPC_KERNEL(tk_adam_f32, AdamParams, false) { AdamBody<float>(p); }
TPRPC_KERNEL(tk_adam_f64, AdamParams, false) { AdamBody<double>(p); }
