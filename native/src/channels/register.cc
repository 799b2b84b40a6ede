// Registers the native channels under one addon export, `channels()`, which returns
// the namespace { shmListen, shmConnect, shmRingBytes, latencySlice, cmaProbeWord, cmaCheck, cmaRead, ... }.
// NB: one export keeps the addon's top-level list (sdk/native/binding.ts NATIVE_FUNCTIONS)
// short; sdk/native/channels.ts types the namespace. Runs on the JS thread at module init.
#include <memory>

#include "channels/common.h"

namespace tprpc {
namespace channels {
void RegisterShm(Napi::Env env, Napi::Object ns);
void RegisterCma(Napi::Env env, Napi::Object ns);
void RegisterUcx(Napi::Env env, Napi::Object ns);
void RegisterHostRegion(Napi::Env env, Napi::Object ns);
void RegisterSched(Napi::Env env, Napi::Object ns);
}  // namespace channels

void RegisterChannels(Napi::Env env, Napi::Object exports) {
  Napi::Object ns = Napi::Object::New(env);
  channels::RegisterShm(env, ns);
  channels::RegisterCma(env, ns);
  channels::RegisterUcx(env, ns);
  channels::RegisterHostRegion(env, ns);
  channels::RegisterSched(env, ns);
  auto ref = std::make_shared<Napi::ObjectReference>(Napi::Persistent(ns));
  exports.Set("channels", Napi::Function::New(env, [ref](const Napi::CallbackInfo&) -> Napi::Value { return ref->Value(); }));
}

}  // namespace tprpc
