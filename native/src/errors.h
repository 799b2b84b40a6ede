// Native failures as typed JS errors. ThrowNative raises an Error whose
// name is "NativeError" with `code` (e.g. "ENOMEM", "EDLOPEN") and `errno`;
// sdk/native/binding.ts turns it into the sdk's NativeError class.
#pragma once
#include <napi.h>

#include <string>

namespace tprpc {

[[noreturn]] void ThrowNative(Napi::Env env, const std::string& code, int err, const std::string& message);

// A NativeError whose `errno` is a library's own result code (a CUresult, an ncclResult_t), not a
// C errno, so no strerror text is added. Throw it, or reject a promise with it.
Napi::Error NativeResultError(Napi::Env env, const std::string& code, int result, const std::string& message);

}  // namespace tprpc
