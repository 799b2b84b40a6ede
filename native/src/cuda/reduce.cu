// Row kernels: reductions over dims, arg-reductions, (log-)softmax and its
// backward, attention's masked softmax. One block per row (grid-stride over
// rows), the block's threads stride along the row, and BlockReduce combines
// them. A "row view" is the tensor's view restricted to the kept dims (shape:
// the output's, strides: the tensor's), so row r starts at Off(rowView, r).
// Float sums accumulate in double, as the reference backend's do.
#include "cuda/kcommon.cuh"
#include "cuda/params.h"

using namespace tprpc::cuda;



namespace {

template <typename Acc>
__device__ void ReduceBody(const ReduceParams& p) {
  TPRPC_ROW_LOOP(r, p.nrows) {
    const long long base = Off(p.rows, r);
    Acc acc;
    if (p.op == 0) {
      acc = 0;
      TPRPC_THREAD_LOOP(k, p.nred) acc += Ld<Acc>(p.rows, base + Off(p.red, k));
      acc = BlockReduce(acc, SumOp());
    } else if (p.op == 1) {
      acc = 1;
      TPRPC_THREAD_LOOP(k, p.nred) acc *= Ld<Acc>(p.rows, base + Off(p.red, k));
      acc = BlockReduce(acc, [](Acc x, Acc y) { return x * y; });
    } else {
      // NB: start from the row's first element (every row is non-empty): no infinity needed for ints.
      acc = Ld<Acc>(p.rows, base + Off(p.red, 0));
      if (p.op == 2) {
        TPRPC_THREAD_LOOP(k, p.nred) acc = MaxOp()(acc, Ld<Acc>(p.rows, base + Off(p.red, k)));
        acc = BlockReduce(acc, MaxOp());
      } else {
        TPRPC_THREAD_LOOP(k, p.nred) acc = MinOp()(acc, Ld<Acc>(p.rows, base + Off(p.red, k)));
        acc = BlockReduce(acc, MinOp());
      }
    }
    if (threadIdx.x == 0) St<Acc>(p.out, Off(p.out, r), acc);
  }
}

struct ArgBest {
  double v;
  long long i;
};

// The better of two candidates for argmax (values negated for argmin): NaN first, then the
// larger value, then the smaller index (torch: the first occurrence).
struct ArgOp {
  __device__ ArgBest operator()(ArgBest a, ArgBest b) const {
    const bool an = a.v != a.v, bn = b.v != b.v;
    if (an || bn) return an && bn ? (a.i < b.i ? a : b) : (an ? a : b);
    if (a.v != b.v) return a.v > b.v ? a : b;
    return a.i < b.i ? a : b;
  }
};

}  // namespace

TPRPC_KERNEL(tk_reduce_f, ReduceParams, true) { ReduceBody<double>(p); }
TPRPC_KERNEL(tk_reduce_i, ReduceParams, true) { ReduceBody<long long>(p); }

TPRPC_KERNEL(tk_argreduce, RowParams, true) {
  TPRPC_ROW_LOOP(r, p.nrows) {
    const long long base = Off(p.a, r);
    ArgBest best{-INFINITY, 0x7fffffffffffffffLL};
    TPRPC_THREAD_LOOP(k, p.size) {
      const double x = Ld<double>(p.a, base + k * p.as);
      best = ArgOp()(best, ArgBest{p.log ? -x : x, k});
    }
    best = BlockReduce(best, ArgOp());
    if (threadIdx.x == 0) St<long long>(p.out, Off(p.out, r), best.i);
  }
}

// softmax / logSoftmax (p.log) of a along the row, into out; maskedSoftmax when p.mask.ptr != 0:
// row r of a contiguous [..., T, S] x uses mask row r % T (true: -inf) and divides by p.divisor.
TPRPC_KERNEL(tk_softmax, RowParams, true) {
  const bool masked = p.mask.ptr != 0;
  TPRPC_ROW_LOOP(r, p.nrows) {
    const long long ab = Off(p.a, r), ob = Off(p.out, r);
    const long long mrow = masked ? (r % p.t) * p.size : 0;
    auto value = [&](long long k) -> double {
      const double x = Ld<double>(p.a, ab + k * p.as);
      if (!masked) return x;
      return Ld<int>(p.mask, Off(p.mask, mrow + k)) != 0 ? -INFINITY : x / p.divisor;
    };
    double mx = -INFINITY;
    TPRPC_THREAD_LOOP(k, p.size) mx = MaxOp()(mx, value(k));
    mx = BlockReduce(mx, MaxOp());
    if (mx == -INFINITY) mx = 0;
    double sum = 0;
    TPRPC_THREAD_LOOP(k, p.size) sum += exp(value(k) - mx);
    sum = BlockReduce(sum, SumOp());
    const double lse = log(sum) + mx;
    TPRPC_THREAD_LOOP(k, p.size) {
      const double v = value(k);
      St<double>(p.out, ob + k * p.os, p.log ? v - lse : exp(v - mx) / sum);
    }
  }
}

// The (log-)softmax backward: a = y (the forward's output), b = g; softmax: y (g - sum g y),
// logSoftmax: g - exp(y) sum g.
TPRPC_KERNEL(tk_softmax_backward, RowParams, true) {
  TPRPC_ROW_LOOP(r, p.nrows) {
    const long long yb = Off(p.a, r), gb = Off(p.b, r), ob = Off(p.out, r);
    double s = 0;
    TPRPC_THREAD_LOOP(k, p.size) {
      const double g = Ld<double>(p.b, gb + k * p.bs);
      s += p.log ? g : g * Ld<double>(p.a, yb + k * p.as);
    }
    s = BlockReduce(s, SumOp());
    TPRPC_THREAD_LOOP(k, p.size) {
      const double y = Ld<double>(p.a, yb + k * p.as), g = Ld<double>(p.b, gb + k * p.bs);
      St<double>(p.out, ob + k * p.os, p.log ? g - exp(y) * s : y * (g - s));
    }
  }
}
