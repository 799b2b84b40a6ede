// What every CUDA kernel source (*.cu here) shares: the strided view a kernel
// reads and writes, element loads and stores by dtype, the grid-stride loop,
// the one block reduction, and the TPRPC_KERNEL macro that declares a kernel.
//
// The same sources compile twice (see docs/architecture.md, "CUDA backend"):
// 1. by nvcc into the fatbin the addon embeds (device code, loaded with
//    cuModuleLoadData and launched by name with cuLaunchKernel);
// 2. by g++ as part of the addon, through shim.h, for the emulated device:
//    TPRPC_KERNEL then also registers a host thunk under the kernel's name.
// Rules that keep both builds equal: every kernel takes ONE parameter struct by
// value (launcher.h passes its bytes), loops grid-stride, and synchronizes a
// block only through BlockReduce.
#pragma once
#ifndef __CUDACC__
#include "cuda/shim.h"
#endif
#include <math.h>

namespace tprpc {
namespace cuda {

constexpr int kMaxDims = 8;
// Reduction kernels run blocks of at most this many threads, a power of two.
constexpr int kMaxBlock = 256;

// Storage dtypes, as sdk/tensor/backend/cuda/kernels.ts numbers them.
enum DTypeCode : int { kF32 = 0, kF64 = 1, kI32 = 2, kI64 = 3, kU8 = 4, kBool = 5 };

// A strided view of device memory: element i of the row-major iteration over `shape` lies at
// ptr + (offset + sum(idx[d] * strides[d])) * itemsize. `contig` says offset + i is that place.
struct View {
  unsigned long long ptr;
  long long offset;
  int ndim;
  int dtype;
  int contig;
  int small;  // 1: the view's element count is below 2^31, so Off() divides in 32 bits
  long long shape[kMaxDims];
  long long strides[kMaxDims];
};

// Storage index of element i of the view's row-major iteration.
__device__ __forceinline__ long long Off(const View& v, long long i) {
  if (v.contig) return v.offset + i;
  if (v.small && i < 0x7fffffffLL) {
    // NB: a 64-bit division is a long instruction sequence on a GPU; 32-bit ones are a few
    unsigned j = static_cast<unsigned>(i);
    long long off = v.offset;
    for (int d = v.ndim - 1; d >= 0; --d) {
      const unsigned s = static_cast<unsigned>(v.shape[d]);
      off += static_cast<long long>(j % s) * v.strides[d];
      j /= s;
    }
    return off;
  }
  long long off = v.offset;
  for (int d = v.ndim - 1; d >= 0; --d) {
    const long long s = v.shape[d];
    off += (i % s) * v.strides[d];
    i /= s;
  }
  return off;
}

template <typename T>
__device__ __forceinline__ T Ld(const View& v, long long off) {
  const char* b = reinterpret_cast<const char*>(v.ptr);
  switch (v.dtype) {
    case kF32: return static_cast<T>(reinterpret_cast<const float*>(b)[off]);
    case kF64: return static_cast<T>(reinterpret_cast<const double*>(b)[off]);
    case kI32: return static_cast<T>(reinterpret_cast<const int*>(b)[off]);
    case kI64: return static_cast<T>(reinterpret_cast<const long long*>(b)[off]);
    case kU8: return static_cast<T>(reinterpret_cast<const unsigned char*>(b)[off]);
    default: return static_cast<T>(reinterpret_cast<const unsigned char*>(b)[off] != 0 ? 1 : 0);
  }
}

template <typename T>
__device__ __forceinline__ void St(const View& v, long long off, T x) {
  char* b = reinterpret_cast<char*>(v.ptr);
  switch (v.dtype) {
    case kF32: reinterpret_cast<float*>(b)[off] = static_cast<float>(x); break;
    case kF64: reinterpret_cast<double*>(b)[off] = static_cast<double>(x); break;
    case kI32: reinterpret_cast<int*>(b)[off] = static_cast<int>(x); break;
    case kI64: reinterpret_cast<long long*>(b)[off] = static_cast<long long>(x); break;
    case kU8: reinterpret_cast<unsigned char*>(b)[off] = static_cast<unsigned char>(x); break;
    default: reinterpret_cast<unsigned char*>(b)[off] = x != static_cast<T>(0) ? 1 : 0; break;
  }
}

// Grid-stride loop over [0, n): every thread of the grid takes every (blocks * threads)-th index.
#define TPRPC_GRID_LOOP(i, n)                                                                     \
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<long long>(blockDim.x) * gridDim.x)

// Block-stride loop over rows: every thread of a block takes the same rows (so BlockReduce is
// reached by the whole block).
#define TPRPC_ROW_LOOP(r, rows) for (long long r = blockIdx.x; r < (rows); r += gridDim.x)

// The block's threads stride over [0, n).
#define TPRPC_THREAD_LOOP(k, n) for (long long k = threadIdx.x; k < (n); k += blockDim.x)

// Combines one value per thread of the block with f (associative, commutative); every thread gets
// the result. blockDim.x must be a power of two <= kMaxBlock, and every thread of the block must
// call it (the only __syncthreads in the kernels).
template <typename T, typename F>
__device__ T BlockReduce(T v, F f) {
  __shared__ T buf[kMaxBlock];
  const unsigned t = threadIdx.x;
  buf[t] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) buf[t] = f(buf[t], buf[t + s]);
    __syncthreads();
  }
  T r = buf[0];
  __syncthreads();  // NB: buf is reused by the block's next call
  return r;
}

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
// max and min with NaN winning, as torch's reductions.
struct MaxOp {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a != a ? a : b != b ? b : a > b ? a : b; }
};
struct MinOp {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a != a ? a : b != b ? b : a < b ? a : b; }
};

// Float math by precision (float: the f-suffixed functions).
__device__ __forceinline__ float Exp(float x) { return expf(x); }
__device__ __forceinline__ double Exp(double x) { return exp(x); }
__device__ __forceinline__ float Log(float x) { return logf(x); }
__device__ __forceinline__ double Log(double x) { return log(x); }
__device__ __forceinline__ float Sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double Sqrt(double x) { return sqrt(x); }

}  // namespace cuda
}  // namespace tprpc

#ifdef __CUDACC__
#define TPRPC_REGISTER_KERNEL(name, P, sync)
#else
#include "cuda/launcher.h"
#define TPRPC_REGISTER_KERNEL(name, P, sync)                                                                 \
  static ::tprpc::cuda::HostKernel tprpc_host_##name(                                                       \
      #name, [](const void* a) { name(*static_cast<const P*>(a)); }, sizeof(P), sync);
#endif

// Declares kernel `name` taking one P by value; `sync`: it calls BlockReduce (the host runs its
// threads as fibers). Follow with the body.
#define TPRPC_KERNEL(name, P, sync)                    \
  extern "C" __global__ void name(const P p);          \
  TPRPC_REGISTER_KERNEL(name, P, sync)                 \
  extern "C" __global__ void name(const P p)
