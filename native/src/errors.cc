// See errors.h. Runs on the JS thread.
#include "errors.h"

#include <cstring>

namespace tprpc {

void ThrowNative(Napi::Env env, const std::string& code, int err, const std::string& message) {
  std::string text = message;
  if (err != 0) text += std::string(" (") + std::strerror(err) + ")";
  Napi::Error e = Napi::Error::New(env, text);
  e.Set("name", Napi::String::New(env, "NativeError"));
  e.Set("code", Napi::String::New(env, code));
  e.Set("errno", Napi::Number::New(env, err));
  throw e;
}

Napi::Error NativeResultError(Napi::Env env, const std::string& code, int result, const std::string& message) {
  Napi::Error e = Napi::Error::New(env, message);
  e.Set("name", Napi::String::New(env, "NativeError"));
  e.Set("code", Napi::String::New(env, code));
  e.Set("errno", Napi::Number::New(env, result));
  return e;
}

// Lets tests check the error path end to end: throwNativeError(code, errno, message).
static Napi::Value ThrowForTest(const Napi::CallbackInfo& info) {
  ThrowNative(info.Env(), info[0].As<Napi::String>(), info[1].As<Napi::Number>().Int32Value(),
              info[2].As<Napi::String>());
}

void RegisterErrors(Napi::Env env, Napi::Object exports) {
  exports.Set("throwNativeError", Napi::Function::New(env, ThrowForTest));
}

}  // namespace tprpc
