// The host side of the CUDA kernels: what nvcc provides to a .cu file
// (__global__, threadIdx/blockIdx/blockDim/gridDim, __shared__, __syncthreads,
// atomicAdd), defined so that g++ compiles the very same kernel sources into
// the addon. A launch then runs the grid as loops on the calling thread
// (launcher.cc, the "emulated CUDA device" of TPRPC_CUDA=emulate): every block
// in turn, and in a block every thread in turn. Kernels that call
// __syncthreads (only BlockReduce in kcommon.cuh does) run their threads as
// fibers that switch at each barrier, so a block reduction computes what it
// computes on a GPU; an indexing mistake in a kernel shows up on the CPU.
//
// Included only when __CUDACC__ is not defined (kcommon.cuh decides).
// Thread: launches are serialized by launcher.cc (one grid at a time per
// process), so the index variables below are plain globals.
#pragma once
#include <cmath>
#include <cstdint>

namespace tprpc {
namespace cuda {

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3() = default;
  dim3(unsigned x_, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace emu {
extern dim3 g_thread_idx, g_block_idx, g_block_dim, g_grid_dim;
// Waits for every thread of the block (the fiber scheduler in launcher.cc).
void SyncThreads();
}  // namespace emu

}  // namespace cuda
}  // namespace tprpc

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
// NB: one block runs at a time on the host, so a function-local static is the block's shared memory.
#define __shared__ static
#define threadIdx (::tprpc::cuda::emu::g_thread_idx)
#define blockIdx (::tprpc::cuda::emu::g_block_idx)
#define blockDim (::tprpc::cuda::emu::g_block_dim)
#define gridDim (::tprpc::cuda::emu::g_grid_dim)
#define __syncthreads() ::tprpc::cuda::emu::SyncThreads()

// Threads of a grid run one after another on the host, so an atomic is a plain read-modify-write.
template <typename T>
inline T atomicAdd(T* p, T v) {
  T old = *p;
  *p = old + v;
  return old;
}

// CUDA's 16-byte vector type (the vectorized float32 kernels load and store four floats at once).
struct alignas(16) float4 {
  float x, y, z, w;
};

template <typename T>
inline T atomicCAS(T* p, T compare, T v) {
  T old = *p;
  if (old == compare) *p = v;
  return old;
}
