// The seam between the CUDA dispatch code (ops.cc: views in, parameter structs
// and launch shapes out) and a device. The dispatch code is the same for both
// launchers; only Launch differs:
// 1. EmulatedLauncher: the host-compiled kernels (registered by TPRPC_KERNEL
//    through HostKernel) run the grid as loops, device memory is host memory;
// 2. DriverLauncher: the fatbin embedded in the addon, loaded once per device
//    with cuModuleLoadData, kernels found with cuModuleGetFunction and run with
//    cuLaunchKernel on the legacy default stream.
// Thread: JS thread (one launch at a time; the emulated launcher also holds a
// mutex, since its grid state is global).
#pragma once
#include <cstddef>
#include <memory>
#include <string>

namespace tprpc {
namespace cuda {

// Words (int64) of the index error word: flag, index, dim, size.
constexpr int kErrorWords = 4;

// A kernel compiled for the host; constructed by TPRPC_KERNEL at static-initialization time.
struct HostKernel {
  HostKernel(const char* name, void (*fn)(const void*), size_t param_size, bool sync);
  const char* name;
  void (*fn)(const void*);
  size_t param_size;
  bool sync;  // calls __syncthreads: runs its threads as fibers
};

const HostKernel* FindHostKernel(const std::string& name);
size_t HostKernelCount();

// One strided-batched GEMM in row-major terms: matrix i of a is at a + i * batch_a (elements),
// its element (r, k) at r * a_rs + k * a_cs; one of a_rs, a_cs is 1 (likewise b); dtype 0 f32, 1 f64.
struct GemmArgs {
  unsigned long long a, b, c;  // device addresses of element 0
  long long m, n, k, count;
  long long a_rs, a_cs, b_rs, b_cs;
  long long batch_a, batch_b;
  int dtype;
  bool accumulate;
};

// Index errors found by a kernel (an out-of-range index) are written to an error word on the
// device: {1, bad index, dim, size} (the first one only); the dispatch code reads it back at the
// next synchronization, or after the launch with CUDA_LAUNCH_BLOCKING=1.
class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual const char* Mode() const = 0;
  // Runs kernel `name` (grid x block threads, 1-D) with the bytes of its parameter struct.
  // Throws std::runtime_error with the driver's message on failure.
  virtual void Launch(int device, const char* name, unsigned grid, unsigned block, const void* params,
                      size_t size) = 0;
  // Device address of the device's zeroed kErrorWords x int64 error word.
  virtual unsigned long long ErrorWord(int device) = 0;
  // Reads the error word (after the launches that may set it) and zeroes it again.
  virtual void TakeError(int device, long long out[kErrorWords]) = 0;
  // C (count x [m, n], row-major, contiguous) (+)= A @ B through a BLAS on the device; false when
  // this launcher has none (the dispatch code then launches tk_matmul). Layout as GemmArgs.
  virtual bool Gemm(int device, const GemmArgs& g) = 0;
};


std::unique_ptr<Launcher> MakeEmulatedLauncher();
// nullptr with *why set when the driver, a device or the fatbin is missing.
std::unique_ptr<Launcher> MakeDriverLauncher(std::string* why);

// OpenBLAS doing what cuBLAS does on a GPU, with the same arguments (ops.cc; the emulated Gemm).
bool EmulatedGemm(const GemmArgs& g);

// Size of the fatbin built into this addon (0 when the build had no nvcc) and why not.
size_t FatbinSize();
const char* FatbinReason();

}  // namespace cuda
}  // namespace tprpc
