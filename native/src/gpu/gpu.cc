// The typed GPU library rows (gpu_api.h) and the addon's `gpu()` namespace:
// status of the CUDA driver, NVRTC, cuBLAS and NCCL, the CUDA devices this
// process sees (name, PCI bus id, compute capability: what channel negotiation
// compares), and an NCCL unique id (the token an NCCL communicator is set up
// with over the RPC control plane). Every function here is safe on a machine
// without these libraries: it reports "not viable" with dynlib's reason, or
// throws NativeError code "ENOTVIABLE" carrying it.
//
// Thread: all of it runs on the JS thread; the calls are short queries
// (ncclGetUniqueId opens a bootstrap socket, a few ms).
#include <napi.h>

#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"
#include "gpu/gpu_api.h"

namespace tprpc {
namespace gpu {
namespace {

using Slot = std::pair<void**, const char*>;

// Resolves every slot from dynlib's table row; false (slots cleared) unless all resolve.
bool Fill(Lib lib, std::initializer_list<Slot> slots) {
  if (!Probe(lib).viable) return false;
  for (const Slot& s : slots) {
    *s.first = Symbol(lib, s.second);
    if (*s.first == nullptr) {
      for (const Slot& c : slots) *c.first = nullptr;
      return false;
    }
  }
  return true;
}

#define SLOT(api, field, sym) Slot(reinterpret_cast<void**>(&(api).field), sym)

template <typename T>
const T* Once(std::once_flag& flag, T& api, bool& ok, bool (*load)(T&)) {
  std::call_once(flag, [&] { ok = load(api); });
  return ok ? &api : nullptr;
}

bool LoadDriver(CudaDriver& d) {
  return Fill(Lib::Cuda, {SLOT(d, cuGetErrorName, "cuGetErrorName"), SLOT(d, cuGetErrorString, "cuGetErrorString"),
                          SLOT(d, cuDeviceGetCount, "cuDeviceGetCount"), SLOT(d, cuDeviceGet, "cuDeviceGet"),
                          SLOT(d, cuDeviceGetName, "cuDeviceGetName"),
                          SLOT(d, cuDeviceGetAttribute, "cuDeviceGetAttribute"),
                          SLOT(d, cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId"),
                          SLOT(d, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
                          SLOT(d, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
                          SLOT(d, cuCtxSetCurrent, "cuCtxSetCurrent"), SLOT(d, cuMemAlloc, "cuMemAlloc_v2"),
                          SLOT(d, cuMemFree, "cuMemFree_v2"), SLOT(d, cuMemcpyHtoD, "cuMemcpyHtoD_v2"),
                          SLOT(d, cuMemcpyDtoH, "cuMemcpyDtoH_v2"), SLOT(d, cuMemcpyDtoD, "cuMemcpyDtoD_v2"),
                          SLOT(d, cuIpcGetMemHandle, "cuIpcGetMemHandle"),
                          SLOT(d, cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2"),
                          SLOT(d, cuIpcCloseMemHandle, "cuIpcCloseMemHandle")});
}

bool LoadNvrtc(Nvrtc& n) {
  return Fill(Lib::Nvrtc, {SLOT(n, nvrtcVersion, "nvrtcVersion"), SLOT(n, nvrtcGetErrorString, "nvrtcGetErrorString"),
                           SLOT(n, nvrtcCreateProgram, "nvrtcCreateProgram"),
                           SLOT(n, nvrtcCompileProgram, "nvrtcCompileProgram"),
                           SLOT(n, nvrtcGetPTXSize, "nvrtcGetPTXSize"), SLOT(n, nvrtcGetPTX, "nvrtcGetPTX"),
                           SLOT(n, nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize"),
                           SLOT(n, nvrtcGetProgramLog, "nvrtcGetProgramLog"),
                           SLOT(n, nvrtcDestroyProgram, "nvrtcDestroyProgram")});
}

bool LoadCublas(Cublas& c) {
  return Fill(Lib::Cublas, {SLOT(c, cublasGetProperty, "cublasGetProperty"), SLOT(c, cublasCreate, "cublasCreate_v2"),
                            SLOT(c, cublasDestroy, "cublasDestroy_v2"),
                            SLOT(c, cublasSetStream, "cublasSetStream_v2")});
}

bool LoadNccl(Nccl& n) {
  return Fill(Lib::Nccl, {SLOT(n, ncclGetVersion, "ncclGetVersion"), SLOT(n, ncclGetErrorString, "ncclGetErrorString"),
                          SLOT(n, ncclGetUniqueId, "ncclGetUniqueId"), SLOT(n, ncclCommInitRank, "ncclCommInitRank"),
                          SLOT(n, ncclCommDestroy, "ncclCommDestroy"), SLOT(n, ncclCommAbort, "ncclCommAbort")});
}

#undef SLOT

std::string CuError(const CudaDriver& d, CUresult rc) {
  const char* name = nullptr;
  if (d.cuGetErrorName(rc, &name) != CUDA_SUCCESS || name == nullptr) name = "CUDA_ERROR_UNKNOWN";
  return std::string(name) + " (" + std::to_string(rc) + ")";
}

[[noreturn]] void NotViable(Napi::Env env, Lib lib) {
  const LibStatus& s = Probe(lib);
  ThrowNative(env, "ENOTVIABLE", 0,
              std::string(LibName(lib)) + " is not viable here: " + (s.reason.empty() ? "unknown reason" : s.reason));
}

Napi::Object StatusOf(Napi::Env env, Lib lib) {
  const LibStatus& s = Probe(lib);
  auto o = Napi::Object::New(env);
  o.Set("viable", Napi::Boolean::New(env, s.viable));
  if (!s.reason.empty()) o.Set("reason", Napi::String::New(env, s.reason));
  if (!s.version.empty()) o.Set("version", Napi::String::New(env, s.version));
  if (!s.path.empty()) o.Set("path", Napi::String::New(env, s.path));
  if (s.devices >= 0) o.Set("devices", Napi::Number::New(env, s.devices));
  return o;
}

// status() -> { cuda, nvrtc, cublas, nccl }: each { viable, reason?, version?, path?, devices? }.
Napi::Value Status(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto o = Napi::Object::New(env);
  for (Lib lib : {Lib::Cuda, Lib::Nvrtc, Lib::Cublas, Lib::Nccl}) o.Set(LibName(lib), StatusOf(env, lib));
  return o;
}

// devices() -> [{ index, name, pciBusId, major, minor, multiProcessors, unifiedAddressing }].
Napi::Value Devices(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver* d = Driver();
  if (d == nullptr) NotViable(env, Lib::Cuda);
  int count = 0;
  CUresult rc = d->cuDeviceGetCount(&count);
  if (rc != CUDA_SUCCESS) ThrowNative(env, "ECUDA", 0, "cuDeviceGetCount failed: " + CuError(*d, rc));
  auto arr = Napi::Array::New(env, count);
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    char name[256] = {0};
    char bus[64] = {0};
    int major = 0, minor = 0, sms = 0, uva = 0;
    if ((rc = d->cuDeviceGet(&dev, i)) != CUDA_SUCCESS ||
        (rc = d->cuDeviceGetName(name, sizeof name - 1, dev)) != CUDA_SUCCESS ||
        (rc = d->cuDeviceGetPCIBusId(bus, sizeof bus - 1, dev)) != CUDA_SUCCESS ||
        (rc = d->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)) != CUDA_SUCCESS ||
        (rc = d->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)) != CUDA_SUCCESS ||
        (rc = d->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)) != CUDA_SUCCESS ||
        (rc = d->cuDeviceGetAttribute(&uva, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, dev)) != CUDA_SUCCESS)
      ThrowNative(env, "ECUDA", 0, "querying CUDA device " + std::to_string(i) + " failed: " + CuError(*d, rc));
    auto o = Napi::Object::New(env);
    o.Set("index", Napi::Number::New(env, i));
    o.Set("name", Napi::String::New(env, name));
    o.Set("pciBusId", Napi::String::New(env, bus));
    o.Set("major", Napi::Number::New(env, major));
    o.Set("minor", Napi::Number::New(env, minor));
    o.Set("multiProcessors", Napi::Number::New(env, sms));
    o.Set("unifiedAddressing", Napi::Boolean::New(env, uva != 0));
    arr.Set(i, o);
  }
  return arr;
}

// ncclUniqueId() -> Buffer(128): the id rank 0 of an NCCL communicator hands to the others.
Napi::Value NcclUniqueId(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Nccl* n = NcclApi();
  if (n == nullptr) NotViable(env, Lib::Nccl);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  ncclResult_t rc = n->ncclGetUniqueId(&id);
  if (rc != 0) {
    const char* why = n->ncclGetErrorString(rc);
    ThrowNative(env, "ENCCL", 0, std::string("ncclGetUniqueId failed: ") + (why ? why : "unknown error"));
  }
  return Napi::Buffer<char>::Copy(env, id.internal, sizeof id.internal);
}

Napi::Value Namespace(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto o = Napi::Object::New(env);
  o.Set("status", Napi::Function::New(env, Status));
  o.Set("devices", Napi::Function::New(env, Devices));
  o.Set("ncclUniqueId", Napi::Function::New(env, NcclUniqueId));
  return o;
}

std::once_flag g_driver_once, g_nvrtc_once, g_cublas_once, g_nccl_once;
CudaDriver g_driver;
Nvrtc g_nvrtc;
Cublas g_cublas;
Nccl g_nccl;
bool g_driver_ok = false, g_nvrtc_ok = false, g_cublas_ok = false, g_nccl_ok = false;

}  // namespace

const CudaDriver* Driver() { return Once(g_driver_once, g_driver, g_driver_ok, LoadDriver); }
const Nvrtc* NvrtcApi() { return Once(g_nvrtc_once, g_nvrtc, g_nvrtc_ok, LoadNvrtc); }
const Cublas* CublasApi() { return Once(g_cublas_once, g_cublas, g_cublas_ok, LoadCublas); }
const Nccl* NcclApi() { return Once(g_nccl_once, g_nccl, g_nccl_ok, LoadNccl); }

}  // namespace gpu

// gpu() -> the namespace above (a function, like channels(), so the export list stays flat).
void RegisterGpu(Napi::Env env, Napi::Object exports) {
  exports.Set("gpu", Napi::Function::New(env, gpu::Namespace));
}

}  // namespace tprpc
