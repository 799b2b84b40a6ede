// The parameter structs of the CUDA kernels: one per kernel family, passed by
// value (cuLaunchKernel copies its bytes; the emulated launcher hands the host
// thunk a pointer to it). Shared by the .cu files and the dispatch code
// (ops.cc), so both sides agree on the layout; plain data only.
#pragma once
#include "cuda/kcommon.cuh"

namespace tprpc {
namespace cuda {

struct EwParams {
  View out, a, b, c;
  long long n;
  int op;
  int b_scalar;   // the float4 kernels: b is one element, broadcast
  double s0, s1;  // fill value; clamp's min and max (NaN: none); powScalar's exponent
};

// sum / prod / max / min over the dims of `red`.
struct ReduceParams {
  View rows;  // x over the kept dims
  View red;   // x's reduced dims (offset 0)
  View out;   // contiguous, one element per row
  long long nrows, nred;
  int op;  // 0 sum, 1 prod, 2 max, 3 min
  int pad;
};

// (arg)max/min, softmax and its backward along one dim; layout as ReduceParams.
struct RowParams {
  View a, b, out;        // row views of the inputs and the output
  View mask;             // maskedSoftmax's [T, S] bool mask
  long long as, bs, os;  // strides along the row's dim
  long long nrows, size;
  long long t;  // maskedSoftmax's T
  double divisor;
  int log;  // logSoftmax / argmin
  int pad;
};

// Layer norm over the last dim of contiguous [rows, d] views.
struct NormParams {
  View x, g, w, b;               // w, b: [d] (ptr 0: absent); g: the output's gradient (backward)
  View out, mean, rstd;          // forward outputs; mean and rstd: [rows]
  View gx, gw, gb;               // backward outputs (ptr 0: not wanted)
  long long rows, d;
  double eps;
};

// out = x.indexSelect / gather(dim, index), or scatterAdd into x (dst).
struct IndexParams {
  View x, index, src, out;
  unsigned long long err;  // the launcher's error word
  long long n;             // elements of out (indexSelect, gather) or of index (scatterAdd)
  long long dim, size;     // the dim and x's size along it
  long long inner;         // indexSelect: elements of x's dims after dim
};

struct AdamParams {
  View p, g, m, v, vmax;  // contiguous, one dtype; vmax ptr 0: no amsgrad
  long long n;
  double decay, l2, beta1, omb1, beta2, omb2, bc2sqrt, eps, negstep;
  int maximize;
  int pad;
};

struct MatmulParams {
  View a, b, out;  // out contiguous
  long long m, n, k, count;
  int accumulate;  // out += a @ b
  int pad;
};

}  // namespace cuda
}  // namespace tprpc
