// Entry point of the tprpc addon: registers every group of functions.
// Loaded by exactly one JS file, sdk/native/binding.ts (node-gyp-build).
#include <malloc.h>
#include <napi.h>

#include <cstdlib>

#include "kernels/kernels.h"
#include "thread_pool.h"

namespace tprpc {
void RegisterErrors(Napi::Env env, Napi::Object exports);
void RegisterDynlib(Napi::Env env, Napi::Object exports);
void RegisterMemory(Napi::Env env, Napi::Object exports);
void RegisterChannels(Napi::Env env, Napi::Object exports);
void RegisterGpu(Napi::Env env, Napi::Object exports);
void RegisterCudaKernels(Napi::Env env, Napi::Object exports);
}  // namespace tprpc

static Napi::Value GetNumThreads(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), tprpc::NumThreads());
}

static Napi::Value SetNumThreads(const Napi::CallbackInfo& info) {
  tprpc::SetNumThreads(info[0].As<Napi::Number>().Int32Value());
  return info.Env().Undefined();
}

// NB: V8's GC frees tensor storages in bursts. With glibc's defaults a burst of frees trims the
// heap, so the next large allocations fault in fresh pages (measured on a 4M-element f32 add:
// 9.7 GB/s in one run out of three, 41-45 in the others; steady 43-45 with this tuning). Keep up to
// 256 MiB of freed heap and serve blocks up to 32 MiB from it, unless the user tuned malloc already.
static void TuneMalloc() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_") ||
      std::getenv("TPRPC_KEEP_MALLOC"))
    return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
  TuneMalloc();
  exports.Set("getNumThreads", Napi::Function::New(env, GetNumThreads));
  exports.Set("setNumThreads", Napi::Function::New(env, SetNumThreads));
  tprpc::RegisterErrors(env, exports);
  tprpc::RegisterDynlib(env, exports);
  tprpc::RegisterMemory(env, exports);
  tprpc::RegisterElementwise(env, exports);
  tprpc::RegisterReduce(env, exports);
  tprpc::RegisterMatmul(env, exports);
  tprpc::RegisterSoftmax(env, exports);
  tprpc::RegisterIndexing(env, exports);
  tprpc::RegisterCopy(env, exports);
  tprpc::RegisterFused(env, exports);
  tprpc::RegisterChannels(env, exports);
  tprpc::RegisterGpu(env, exports);
  tprpc::RegisterCudaKernels(env, exports);
  return exports;
}

NODE_API_MODULE(tprpc, Init)
