// A JS BigInt argument (a device pointer, a stream or communicator handle) as a uint64_t, for the
// bindings that take them (native/src/gpu, native/src/cuda). Bits above 64 are dropped: the SDK only
// passes back values the addon handed out.
#pragma once
#include <napi.h>

#include <cstdint>

namespace tprpc {

inline uint64_t BigIntU64(const Napi::Value& v) {
  bool lossless = true;
  return v.As<Napi::BigInt>().Uint64Value(&lossless);
}

}  // namespace tprpc
