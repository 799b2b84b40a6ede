// The few CUDA driver, NVRTC, cuBLAS and NCCL types and entry points tprpc
// calls, declared here rather than taken from the CUDA headers: the addon is
// built on machines (CI) without a CUDA toolkit, links against none of these
// libraries, and reaches them only through dynlib's dlopen table
// (native/src/dynlib.cc, the one list of sonames and symbols). Each struct
// below is a typed view of that table's row: Load() fills it from Symbol() and
// returns false when the library is not viable (Probe(lib).reason says why).
//
// ABI notes: CUresult, nvrtcResult, cublasStatus_t and ncclResult_t are C enums
// (int); handles are opaque pointers; CUdeviceptr is 64-bit on every 64-bit
// platform; ncclUniqueId is 128 bytes, CUipcMemHandle and CUipcEventHandle 64.
//
// Thread safety: Load() may be called from any thread (dynlib probes once);
// the function pointers are immutable afterwards.
#pragma once
#include <cstddef>
#include <cstdint>

#include "dynlib.h"

namespace tprpc {
namespace gpu {

// ---- CUDA driver API ----------------------------------------------------------------------------
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
struct CUipcMemHandle { char reserved[64]; };
struct CUipcEventHandle { char reserved[64]; };

constexpr CUresult CUDA_SUCCESS = 0;
// CUdevice_attribute values (stable across CUDA releases).
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;

struct CudaDriver {
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDeviceGetPCIBusId)(char*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);  // _v2
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuMemGetInfo)(size_t*, size_t*);    // _v2
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);  // _v2
  CUresult (*cuMemFree)(CUdeviceptr);            // _v2
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);  // _v2
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);        // _v2
  CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);  // _v2
  CUresult (*cuMemcpyPeerAsync)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuIpcGetMemHandle)(CUipcMemHandle*, CUdeviceptr);
  CUresult (*cuIpcOpenMemHandle)(CUdeviceptr*, CUipcMemHandle, unsigned);  // _v2
  CUresult (*cuIpcCloseMemHandle)(CUdeviceptr);
  // -- caching allocator, streams, events, pinned host memory, async copies --
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);  // _v2
  CUresult (*cuStreamQuery)(CUstream);
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventQuery)(CUevent);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventDestroy)(CUevent);  // _v2
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned);
  CUresult (*cuMemFreeHost)(void*);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);  // _v2
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);        // _v2
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);  // _v2
  CUresult (*cuMemGetAddressRange)(CUdeviceptr*, size_t*, CUdeviceptr);     // _v2
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  // -- cuda_ipc channel: interprocess events (gpu/cuda_ipc.cc) --
  CUresult (*cuIpcGetEventHandle)(CUipcEventHandle*, CUevent);
  CUresult (*cuIpcOpenEventHandle)(CUevent*, CUipcEventHandle);
};

// CUresult values and flags the allocator and copies use (stable across CUDA releases).
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;
constexpr unsigned CU_STREAM_NON_BLOCKING = 1;
constexpr unsigned CU_EVENT_DISABLE_TIMING = 2;
constexpr unsigned CU_EVENT_INTERPROCESS = 4;
constexpr unsigned CU_MEMHOSTALLOC_PORTABLE = 1;

// ---- NVRTC ---------------------------------------------------------------------------------------
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;

struct Nvrtc {
  nvrtcResult (*nvrtcVersion)(int*, int*);
  const char* (*nvrtcGetErrorString)(nvrtcResult);
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                    const char* const*);
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int, const char* const*);
  nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram, size_t*);
  nvrtcResult (*nvrtcGetPTX)(nvrtcProgram, char*);
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t*);
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char*);
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram*);
};

// ---- cuBLAS --------------------------------------------------------------------------------------
using cublasStatus_t = int;
using cublasHandle_t = struct cublasContext*;

struct Cublas {
  cublasStatus_t (*cublasGetProperty)(int, int*);
  cublasStatus_t (*cublasCreate)(cublasHandle_t*);   // _v2
  cublasStatus_t (*cublasDestroy)(cublasHandle_t);   // _v2
  cublasStatus_t (*cublasSetStream)(cublasHandle_t, CUstream);  // _v2
};

// ---- NCCL ----------------------------------------------------------------------------------------
using ncclResult_t = int;
using ncclComm_t = struct ncclComm*;
struct ncclUniqueId { char internal[128]; };

struct Nccl {
  ncclResult_t (*ncclGetVersion)(int*);
  const char* (*ncclGetErrorString)(ncclResult_t);
  ncclResult_t (*ncclGetUniqueId)(ncclUniqueId*);
  ncclResult_t (*ncclCommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*ncclCommDestroy)(ncclComm_t);
  ncclResult_t (*ncclCommAbort)(ncclComm_t);
  // -- nccl channel: point-to-point on a stream (gpu/nccl.cc) --
  ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t, ncclResult_t*);
  ncclResult_t (*ncclGroupStart)();
  ncclResult_t (*ncclGroupEnd)();
  // ncclDataType_t is an int enum: ncclUint8 = 1. The stream is a cudaStream_t, which is a CUstream.
  ncclResult_t (*ncclSend)(const void*, size_t, int, int, ncclComm_t, CUstream);
  ncclResult_t (*ncclRecv)(void*, size_t, int, int, ncclComm_t, CUstream);
};
constexpr int ncclUint8 = 1;
constexpr ncclResult_t ncclInProgress = 7;

// ---- CUDA kernels and cuBLAS GEMMs (native/src/cuda) -----------------------------------
// The driver calls that load the addon's fatbin and launch its kernels, and the cuBLAS GEMMs of
// the CUDA matmul. Filled by cuda/driver_launcher.cc from the same dynlib rows as above.
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;

struct CudaKernelApi {
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);                // _v2
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);  // _v2
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);        // _v2
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
};

// cublasOperation_t: CUBLAS_OP_N = 0, CUBLAS_OP_T = 1. Column-major, as BLAS.
struct CublasGemm {
  cublasStatus_t (*cublasCreate)(cublasHandle_t*);  // _v2
  cublasStatus_t (*cublasSgemm)(cublasHandle_t, int, int, int, int, int, const float*, const float*, int,
                                const float*, int, const float*, float*, int);  // _v2
  cublasStatus_t (*cublasDgemm)(cublasHandle_t, int, int, int, int, int, const double*, const double*, int,
                                const double*, int, const double*, double*, int);  // _v2
  cublasStatus_t (*cublasSgemmStridedBatched)(cublasHandle_t, int, int, int, int, int, const float*, const float*,
                                              int, long long, const float*, int, long long, const float*, float*,
                                              int, long long, int);
  cublasStatus_t (*cublasDgemmStridedBatched)(cublasHandle_t, int, int, int, int, int, const double*,
                                              const double*, int, long long, const double*, int, long long,
                                              const double*, double*, int, long long, int);
};

const CudaKernelApi* KernelApi();
const CublasGemm* CublasGemmApi();

// The typed rows, filled once; nullptr when the library is not viable.
const CudaDriver* Driver();
const Nvrtc* NvrtcApi();
const Cublas* CublasApi();
const Nccl* NcclApi();

}  // namespace gpu
}  // namespace tprpc
