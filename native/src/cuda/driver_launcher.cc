// The launcher for a real CUDA device (launcher.h): the fatbin that the build
// embedded (native/gen/tprpc_fatbin.inc, written by native/build.mjs from the
// .cu files with nvcc; empty when the build had no nvcc) is loaded once per
// device into its primary context; kernels are looked up by name once and run
// with cuLaunchKernel on the legacy default stream, so they are ordered with the
// synchronous copies of sdk/tensor/backend/cuda. cuBLAS, when dlopen finds it,
// does the GEMMs (one handle per device).
//
// NB: written against the driver API's documented ABI; first run on a GPU (an H200) on 2026-11-27,
// where npm run gpu:check passed (docs/architecture.md, "On a GPU"). What only a GPU run checks:
// 1. cuModuleLoadData takes the compressed fatbin (sm_90 SASS on H100/H200, sm_80 on A100, the
//    compute_90 PTX JIT-compiled elsewhere) and every tk_* name resolves: test/cuda/parity_device.
// 2. The kernels' results on the device: the same suite (ops, modules, losses, GPT block, Adam).
// 3. BlockReduce's shared memory and barriers on real warps; atomicAdd in tk_scatter_add (float
//    order differs run to run: within tolerance, not bit-equal).
// 4. cuBLAS's GEMM arguments (the emulated device checks them against OpenBLAS): bmm, transposed
//    and broadcast batches in the same suite, with cuBLAS found by dlopen.
// 5. The error word after an out-of-range index, the MLP and the GPT steps: test/cuda/device.
// 6. Ordering with the caching allocator's streams: these launches use the legacy default stream.
// 7. Speed (bench/cuda_ops.ts --torch; gpu:check's bench and gpt; TPRPC_GPU_CHECK_SECTIONS=ops).
// Thread: JS thread.
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/launcher.h"
#include "dynlib.h"
#include "gpu/gpu_api.h"

#if defined(__has_include)
#if __has_include("tprpc_fatbin.inc")
#include "tprpc_fatbin.inc"
#define TPRPC_HAVE_FATBIN_INC 1
#endif
#endif
#ifndef TPRPC_HAVE_FATBIN_INC
static const unsigned char kTprpcFatbin[1] = {0};
static const size_t kTprpcFatbinSize = 0;
static const char* const kTprpcFatbinReason =
    "the addon was built without native/gen/tprpc_fatbin.inc (build it with `npm run build:native`)";
#endif

namespace tprpc {
namespace gpu {
namespace {

template <typename T>
bool Resolve(Lib lib, T*& slot, const char* name) {
  slot = reinterpret_cast<T*>(Symbol(lib, name));
  return slot != nullptr;
}
#define RESOLVE(lib, api, field, sym) ok = ok && Resolve(lib, (api).field, sym)

CudaKernelApi g_kernel_api;
CublasGemm g_gemm_api;

bool LoadKernelApi() {
  bool ok = true;
  auto& a = g_kernel_api;
  RESOLVE(Lib::Cuda, a, cuGetErrorName, "cuGetErrorName");
  RESOLVE(Lib::Cuda, a, cuDeviceGet, "cuDeviceGet");
  RESOLVE(Lib::Cuda, a, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  RESOLVE(Lib::Cuda, a, cuCtxSetCurrent, "cuCtxSetCurrent");
  RESOLVE(Lib::Cuda, a, cuMemAlloc, "cuMemAlloc_v2");
  RESOLVE(Lib::Cuda, a, cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  RESOLVE(Lib::Cuda, a, cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  RESOLVE(Lib::Cuda, a, cuModuleLoadData, "cuModuleLoadData");
  RESOLVE(Lib::Cuda, a, cuModuleGetFunction, "cuModuleGetFunction");
  RESOLVE(Lib::Cuda, a, cuLaunchKernel, "cuLaunchKernel");
  return ok;
}

bool LoadGemmApi() {
  bool ok = true;
  auto& c = g_gemm_api;
  RESOLVE(Lib::Cublas, c, cublasCreate, "cublasCreate_v2");
  RESOLVE(Lib::Cublas, c, cublasSgemm, "cublasSgemm_v2");
  RESOLVE(Lib::Cublas, c, cublasDgemm, "cublasDgemm_v2");
  RESOLVE(Lib::Cublas, c, cublasSgemmStridedBatched, "cublasSgemmStridedBatched");
  RESOLVE(Lib::Cublas, c, cublasDgemmStridedBatched, "cublasDgemmStridedBatched");
  return ok;
}
#undef RESOLVE

}  // namespace

const CudaKernelApi* KernelApi() {
  static const bool ok = LoadKernelApi();
  return ok ? &g_kernel_api : nullptr;
}

const CublasGemm* CublasGemmApi() {
  static const bool ok = LoadGemmApi();
  return ok ? &g_gemm_api : nullptr;
}

}  // namespace gpu

namespace cuda {
namespace {

using gpu::CUresult;

class DriverLauncher : public Launcher {
 public:
  explicit DriverLauncher(const gpu::CudaKernelApi* api) : api_(api) {}

  const char* Mode() const override { return "device"; }

  void Launch(int device, const char* name, unsigned grid, unsigned block, const void* params,
              size_t size) override {
    PerDevice& d = Open(device);
    auto it = d.functions.find(name);
    if (it == d.functions.end()) {
      gpu::CUfunction f = nullptr;
      Check(api_->cuModuleGetFunction(&f, d.module, name), (std::string("cuModuleGetFunction ") + name).c_str());
      it = d.functions.emplace(name, f).first;
    }
    // NB: cuLaunchKernel copies the parameter bytes at the call: `params` may go away after it.
    (void)size;
    void* args[] = {const_cast<void*>(params)};
    Check(api_->cuLaunchKernel(it->second, grid, 1, 1, block, 1, 1, 0, nullptr, args, nullptr),
          (std::string("cuLaunchKernel ") + name).c_str());
  }

  unsigned long long ErrorWord(int device) override { return Open(device).err; }

  void TakeError(int device, long long out[kErrorWords]) override {
    PerDevice& d = Open(device);
    Check(api_->cuMemcpyDtoH(out, d.err, kErrorWords * sizeof(long long)), "cuMemcpyDtoH (error word)");
    if (out[0] != 0) {
      const long long zero[kErrorWords] = {};
      Check(api_->cuMemcpyHtoD(d.err, zero, sizeof zero), "cuMemcpyHtoD (error word)");
    }
  }

  bool Gemm(int device, const GemmArgs& g) override {
    const gpu::CublasGemm* c = gpu::CublasGemmApi();
    if (c == nullptr) return false;
    PerDevice& d = Open(device);
    if (d.blas == nullptr && c->cublasCreate(&d.blas) != 0) return false;
    // Row-major C = A B is column-major C^T = B^T A^T: B's memory read column-major is B^T
    // (op N, ld = its row stride) when its columns are unit-stride, else op T.
    const bool bn = g.b_cs == 1, an = g.a_cs == 1;
    const int opb = bn ? 0 : 1, opa = an ? 0 : 1;
    const long long ldb = bn ? g.b_rs : g.b_cs, lda = an ? g.a_rs : g.a_cs;
    if (ldb < (bn ? g.n : g.k) || lda < (an ? g.k : g.m) || ldb < 1 || lda < 1) return false;
    int rc;
    if (g.dtype == 0) {
      const float one = 1, beta = g.accumulate ? 1.f : 0.f;
      rc = c->cublasSgemmStridedBatched(d.blas, opb, opa, g.n, g.m, g.k, &one, reinterpret_cast<const float*>(g.b),
                                        ldb, g.batch_b, reinterpret_cast<const float*>(g.a), lda, g.batch_a, &beta,
                                        reinterpret_cast<float*>(g.c), g.n, g.m * g.n, g.count);
    } else {
      const double one = 1, beta = g.accumulate ? 1. : 0.;
      rc = c->cublasDgemmStridedBatched(d.blas, opb, opa, g.n, g.m, g.k, &one, reinterpret_cast<const double*>(g.b),
                                        ldb, g.batch_b, reinterpret_cast<const double*>(g.a), lda, g.batch_a, &beta,
                                        reinterpret_cast<double*>(g.c), g.n, g.m * g.n, g.count);
    }
    if (rc != 0) throw std::runtime_error("cublas GEMM failed with status " + std::to_string(rc));
    return true;
  }

 private:
  struct PerDevice {
    gpu::CUcontext ctx = nullptr;
    gpu::CUmodule module = nullptr;
    gpu::CUdeviceptr err = 0;
    gpu::cublasHandle_t blas = nullptr;
    std::map<std::string, gpu::CUfunction> functions;
  };

  void Check(CUresult rc, const char* what) {
    if (rc == gpu::CUDA_SUCCESS) return;
    const char* name = nullptr;
    if (api_->cuGetErrorName(rc, &name) != gpu::CUDA_SUCCESS || name == nullptr) name = "CUDA_ERROR_UNKNOWN";
    throw std::runtime_error(std::string(what) + " failed: " + name + " (" + std::to_string(rc) + ")");
  }

  PerDevice& Open(int device) {
    if (device < 0) throw std::runtime_error("invalid CUDA device " + std::to_string(device));
    if (devices_.size() <= static_cast<size_t>(device)) devices_.resize(device + 1);
    PerDevice& d = devices_[device];
    if (d.ctx == nullptr) {
      gpu::CUdevice dev = 0;
      Check(api_->cuDeviceGet(&dev, device), "cuDeviceGet");
      Check(api_->cuDevicePrimaryCtxRetain(&d.ctx, dev), "cuDevicePrimaryCtxRetain");
    }
    Check(api_->cuCtxSetCurrent(d.ctx), "cuCtxSetCurrent");
    if (d.module == nullptr) {
      Check(api_->cuModuleLoadData(&d.module, kTprpcFatbin), "cuModuleLoadData (the addon's fatbin)");
      Check(api_->cuMemAlloc(&d.err, kErrorWords * sizeof(long long)), "cuMemAlloc (error word)");
      const long long zero[kErrorWords] = {};
      Check(api_->cuMemcpyHtoD(d.err, zero, sizeof zero), "cuMemcpyHtoD (error word)");
    }
    return d;
  }

  const gpu::CudaKernelApi* api_;
  std::vector<PerDevice> devices_;
};

}  // namespace

size_t FatbinSize() { return kTprpcFatbinSize; }
const char* FatbinReason() { return kTprpcFatbinReason; }

std::unique_ptr<Launcher> MakeDriverLauncher(std::string* why) {
  if (kTprpcFatbinSize == 0) {
    *why = std::string("this addon has no CUDA kernels: ") + kTprpcFatbinReason;
    return nullptr;
  }
  const LibStatus& s = Probe(Lib::Cuda);
  if (!s.viable) {
    *why = s.reason;
    return nullptr;
  }
  const gpu::CudaKernelApi* api = gpu::KernelApi();
  if (api == nullptr) {
    *why = "the CUDA driver lacks the module and launch entry points";
    return nullptr;
  }
  return std::unique_ptr<Launcher>(new DriverLauncher(api));
}

}  // namespace cuda
}  // namespace tprpc
