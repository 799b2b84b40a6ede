// Every CUDA kernel of tprpc, as one translation unit: nvcc compiles this file
// into the fatbin the addon embeds (native/build.mjs), and g++ compiles it for
// the emulated device through host_kernels.cc. Add a kernel source here.
#include "cuda/elementwise.cu"
#include "cuda/reduce.cu"
#include "cuda/nn.cu"
#include "cuda/matmul.cu"
