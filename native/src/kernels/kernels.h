// Registration of the CPU kernels. Each kernels/*.cc file defines one
// Register*(env, exports) that adds its functions to the addon's exports.
// JS-facing contract (all synchronous; large work is split across the
// persistent thread pool in thread_pool.h while the JS thread waits):
//   unary(op: string, x: View, out: View, a0?: number, a1?: number)
//   binary(op: string, a: View, b: View, out: View)     // a, b broadcast to out's shape
//   where(cond: View(u8), a: View, b: View, out: View)
//   reduce(op: "sum"|"prod"|"max"|"min", x: View, dims: number[], out: View)
//   argReduce(op: "argmax"|"argmin", x: View, dim: number, out: View(i64))
//   matmul(a: View[B,M,K], b: View[B,K,N], out: View[B,M,N])
//   softmax(x: View, dim: number, log: boolean, out: View)
//   indexSelect(x, dim, index(i64|i32, 1-D), out); gather(x, dim, index, out); scatterAdd(dst, dim, index, src)
//   copy(src: View, dst: View)  (f32/f64 casts included); fill(dst: View, value: number)
// `out` is always contiguous and allocated by the caller. Ops are named as in
// sdk/tensor/backend/interface.ts. Unknown ops throw a TypeError.
#pragma once
#include <napi.h>

namespace tprpc {
void RegisterElementwise(Napi::Env env, Napi::Object exports);
void RegisterReduce(Napi::Env env, Napi::Object exports);
void RegisterMatmul(Napi::Env env, Napi::Object exports);
void RegisterSoftmax(Napi::Env env, Napi::Object exports);
void RegisterIndexing(Napi::Env env, Napi::Object exports);
void RegisterCopy(Napi::Env env, Napi::Object exports);
}  // namespace tprpc
