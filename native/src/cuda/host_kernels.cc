// The CUDA kernels compiled for the host (kcommon.cuh includes shim.h when
// __CUDACC__ is not defined): the emulated device's code, built into every
// addon whether or not nvcc is present.
#include "cuda/kernels.cu"
