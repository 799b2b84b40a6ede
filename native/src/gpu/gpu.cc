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
#include "napi_bigint.h"
#include "gpu/cuda_memory.h"
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
                          SLOT(d, cuCtxSetCurrent, "cuCtxSetCurrent"), SLOT(d, cuMemGetInfo, "cuMemGetInfo_v2"), SLOT(d, cuMemAlloc, "cuMemAlloc_v2"),
                          SLOT(d, cuMemFree, "cuMemFree_v2"), SLOT(d, cuMemcpyHtoD, "cuMemcpyHtoD_v2"),
                          SLOT(d, cuMemcpyDtoH, "cuMemcpyDtoH_v2"), SLOT(d, cuMemcpyDtoD, "cuMemcpyDtoD_v2"),
                          SLOT(d, cuMemcpyPeerAsync, "cuMemcpyPeerAsync"),
                          SLOT(d, cuStreamSynchronize, "cuStreamSynchronize"),
                          SLOT(d, cuIpcGetMemHandle, "cuIpcGetMemHandle"),
                          SLOT(d, cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2"),
                          SLOT(d, cuIpcCloseMemHandle, "cuIpcCloseMemHandle"),
                          // caching allocator, streams, events, pinned memory, async copies
                          SLOT(d, cuStreamCreate, "cuStreamCreate"), SLOT(d, cuStreamDestroy, "cuStreamDestroy_v2"),
                          SLOT(d, cuStreamQuery, "cuStreamQuery"), SLOT(d, cuStreamWaitEvent, "cuStreamWaitEvent"),
                          SLOT(d, cuEventCreate, "cuEventCreate"), SLOT(d, cuEventRecord, "cuEventRecord"),
                          SLOT(d, cuEventQuery, "cuEventQuery"), SLOT(d, cuEventSynchronize, "cuEventSynchronize"),
                          SLOT(d, cuEventDestroy, "cuEventDestroy_v2"), SLOT(d, cuMemHostAlloc, "cuMemHostAlloc"),
                          SLOT(d, cuMemFreeHost, "cuMemFreeHost"), SLOT(d, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
                          SLOT(d, cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
                          SLOT(d, cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
                          SLOT(d, cuMemGetAddressRange, "cuMemGetAddressRange_v2"),
                          SLOT(d, cuCtxSynchronize, "cuCtxSynchronize"),
                          SLOT(d, cuMemsetD8Async, "cuMemsetD8Async"),
                          SLOT(d, cuIpcGetEventHandle, "cuIpcGetEventHandle"),
                          SLOT(d, cuIpcOpenEventHandle, "cuIpcOpenEventHandle")});
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
                          SLOT(n, ncclCommDestroy, "ncclCommDestroy"), SLOT(n, ncclCommAbort, "ncclCommAbort"),
                          SLOT(n, ncclCommGetAsyncError, "ncclCommGetAsyncError"),
                          SLOT(n, ncclGroupStart, "ncclGroupStart"), SLOT(n, ncclGroupEnd, "ncclGroupEnd"),
                          SLOT(n, ncclSend, "ncclSend"), SLOT(n, ncclRecv, "ncclRecv")});
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

// ---- device memory (the tensor layer's CUDA DeviceBackend, sdk/tensor/backend/cuda) ---------------
// NB: untested on a GPU so far (`npm run gpu:check` runs it on one); tests use a stand-in libcuda whose
// "device" pointers are host memory. Every call is synchronous and runs on the JS thread, with the
// device's primary context made current first.

std::vector<CUcontext> g_ctx;  // JS thread only: primary context per device, retained once

const CudaDriver& Current(Napi::Env env, int device, CUcontext* ctx_out = nullptr) {
  const CudaDriver* d = Driver();
  if (d == nullptr) NotViable(env, Lib::Cuda);
  int count = 0;
  d->cuDeviceGetCount(&count);
  if (device < 0 || device >= count)
    ThrowNative(env, "ECUDA", 0, "invalid device ordinal " + std::to_string(device) + " (" + std::to_string(count) +
                                     " device(s))");
  if (g_ctx.size() < static_cast<size_t>(count)) g_ctx.resize(count, nullptr);
  CUresult rc;
  if (g_ctx[device] == nullptr) {
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    if ((rc = d->cuDeviceGet(&dev, device)) != CUDA_SUCCESS || (rc = d->cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS)
      ThrowNative(env, "ECUDA", 0, "cannot open CUDA device " + std::to_string(device) + ": " + CuError(*d, rc));
    g_ctx[device] = ctx;
  }
  if ((rc = d->cuCtxSetCurrent(g_ctx[device])) != CUDA_SUCCESS)
    ThrowNative(env, "ECUDA", 0, "cuCtxSetCurrent failed: " + CuError(*d, rc));
  if (ctx_out) *ctx_out = g_ctx[device];
  return *d;
}

void Check(Napi::Env env, const CudaDriver& d, CUresult rc, const char* what) {
  if (rc != CUDA_SUCCESS) ThrowNative(env, "ECUDA", 0, std::string(what) + " failed: " + CuError(d, rc));
}

CUdeviceptr Ptr(const Napi::Value& v) {
  return static_cast<CUdeviceptr>(BigIntU64(v));
}

// Bytes of an ArrayBufferView argument.
std::pair<uint8_t*, size_t> Bytes(const Napi::Value& v) {
  auto view = v.As<Napi::TypedArray>();
  auto* base = static_cast<uint8_t*>(view.ArrayBuffer().Data()) + view.ByteOffset();
  return {base, view.ByteLength()};
}

// memAlloc(device, bytes) -> BigInt device pointer.
Napi::Value MemAlloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = Current(env, info[0].As<Napi::Number>().Int32Value());
  CUdeviceptr p = 0;
  Check(env, d, d.cuMemAlloc(&p, static_cast<size_t>(info[1].As<Napi::Number>().Int64Value())), "cuMemAlloc");
  return Napi::BigInt::New(env, static_cast<uint64_t>(p));
}

// memInfo(device) -> { free, total } bytes, as torch.cuda.mem_get_info.
Napi::Value MemInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = Current(env, info[0].As<Napi::Number>().Int32Value());
  size_t free_bytes = 0, total = 0;
  Check(env, d, d.cuMemGetInfo(&free_bytes, &total), "cuMemGetInfo");
  auto o = Napi::Object::New(env);
  o.Set("free", Napi::Number::New(env, static_cast<double>(free_bytes)));
  o.Set("total", Napi::Number::New(env, static_cast<double>(total)));
  return o;
}

// memFree(device, ptr)
Napi::Value MemFree(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = Current(env, info[0].As<Napi::Number>().Int32Value());
  Check(env, d, d.cuMemFree(Ptr(info[1])), "cuMemFree");
  return env.Undefined();
}

// copyHtoD(device, dst, dstOffset, src view)
Napi::Value CopyHtoD(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = Current(env, info[0].As<Napi::Number>().Int32Value());
  auto [src, n] = Bytes(info[3]);
  CUdeviceptr dst = Ptr(info[1]) + static_cast<CUdeviceptr>(info[2].As<Napi::Number>().Int64Value());
  Check(env, d, d.cuMemcpyHtoD(dst, src, n), "cuMemcpyHtoD");
  return env.Undefined();
}

// copyDtoH(device, src, srcOffset, dst view)
Napi::Value CopyDtoH(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = Current(env, info[0].As<Napi::Number>().Int32Value());
  auto [dst, n] = Bytes(info[3]);
  CUdeviceptr src = Ptr(info[1]) + static_cast<CUdeviceptr>(info[2].As<Napi::Number>().Int64Value());
  Check(env, d, d.cuMemcpyDtoH(dst, src, n), "cuMemcpyDtoH");
  return env.Undefined();
}

// copyDtoD(srcDevice, src, srcOffset, dstDevice, dst, dstOffset, bytes): blocks until the bytes landed.
Napi::Value CopyDtoD(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int sdev = info[0].As<Napi::Number>().Int32Value();
  int ddev = info[3].As<Napi::Number>().Int32Value();
  CUcontext sctx = nullptr, dctx = nullptr;
  Current(env, sdev, &sctx);
  const CudaDriver& d = Current(env, ddev, &dctx);
  CUdeviceptr src = Ptr(info[1]) + static_cast<CUdeviceptr>(info[2].As<Napi::Number>().Int64Value());
  CUdeviceptr dst = Ptr(info[4]) + static_cast<CUdeviceptr>(info[5].As<Napi::Number>().Int64Value());
  size_t n = static_cast<size_t>(info[6].As<Napi::Number>().Int64Value());
  // NB: device-to-device copies do not block the host, so wait on the legacy default stream.
  if (sdev == ddev) Check(env, d, d.cuMemcpyDtoD(dst, src, n), "cuMemcpyDtoD");
  else Check(env, d, d.cuMemcpyPeerAsync(dst, dctx, src, sctx, n, nullptr), "cuMemcpyPeerAsync");
  Check(env, d, d.cuStreamSynchronize(nullptr), "cuStreamSynchronize");
  return env.Undefined();
}

Napi::Value Namespace(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto o = Napi::Object::New(env);
  o.Set("status", Napi::Function::New(env, Status));
  o.Set("devices", Napi::Function::New(env, Devices));
  o.Set("ncclUniqueId", Napi::Function::New(env, NcclUniqueId));
  o.Set("memAlloc", Napi::Function::New(env, MemAlloc));
  o.Set("memFree", Napi::Function::New(env, MemFree));
  o.Set("memInfo", Napi::Function::New(env, MemInfo));
  o.Set("copyHtoD", Napi::Function::New(env, CopyHtoD));
  o.Set("copyDtoH", Napi::Function::New(env, CopyDtoH));
  o.Set("copyDtoD", Napi::Function::New(env, CopyDtoD));
  AddCudaMemory(env, o);
  AddCudaIpc(env, o);
  AddNccl(env, o);
  return o;
}

std::once_flag g_driver_once, g_nvrtc_once, g_cublas_once, g_nccl_once;
CudaDriver g_driver;
Nvrtc g_nvrtc;
Cublas g_cublas;
Nccl g_nccl;
bool g_driver_ok = false, g_nvrtc_ok = false, g_cublas_ok = false, g_nccl_ok = false;

}  // namespace

const CudaDriver& MakeCurrent(Napi::Env env, int device, CUcontext* ctx_out) { return Current(env, device, ctx_out); }

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
