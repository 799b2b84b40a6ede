// Entry point of the tprpc addon: registers every group of functions.
// Loaded by exactly one JS file, sdk/native/binding.ts (node-gyp-build).
#include <napi.h>

#include "kernels/kernels.h"
#include "thread_pool.h"

namespace tprpc {
void RegisterErrors(Napi::Env env, Napi::Object exports);
void RegisterDynlib(Napi::Env env, Napi::Object exports);
void RegisterMemory(Napi::Env env, Napi::Object exports);
}  // namespace tprpc

static Napi::Value GetNumThreads(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), tprpc::NumThreads());
}

static Napi::Value SetNumThreads(const Napi::CallbackInfo& info) {
  tprpc::SetNumThreads(info[0].As<Napi::Number>().Int32Value());
  return info.Env().Undefined();
}

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
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
  return exports;
}

NODE_API_MODULE(tprpc, Init)
