// The memory half of the addon's gpu() namespace (cuda_memory.cc): the caching
// allocator per device, streams, pinned host memory and stream-ordered copies.
// gpu.cc owns the namespace object and the per-device primary contexts.
#pragma once
#include <napi.h>

#include "gpu/gpu_api.h"

namespace tprpc {
namespace gpu {

// The driver, with `device`'s primary context current (retained on first use); throws
// NativeError ENOTVIABLE without a driver, ECUDA for a bad ordinal. JS thread.
const CudaDriver& MakeCurrent(Napi::Env env, int device, CUcontext* ctx_out = nullptr);

// Adds the functions of cuda_memory.cc to the gpu() namespace object.
void AddCudaMemory(Napi::Env env, Napi::Object ns);
// Adds the cuda_ipc channel's calls (cuda_ipc.cc): IPC memory and event handles, events, stream waits.
void AddCudaIpc(Napi::Env env, Napi::Object ns);
// Adds the nccl channel's calls (nccl.cc): communicators, send/recv, async errors.
void AddNccl(Napi::Env env, Napi::Object ns);

}  // namespace gpu
}  // namespace tprpc
