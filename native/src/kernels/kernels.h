// Registration of the CPU kernels. Each kernels/*.cc file defines one
// Register*(env, exports) that adds its functions to the addon's exports.
// JS-facing contract (all synchronous; large work is split across the
// persistent thread pool in thread_pool.h while the JS thread waits):
//   unary(op: string, x: View, out: View, a0?: number, a1?: number)
//       clamp: a0/a1 = min/max (NaN or absent: none); powScalar: a0 = exponent.
//       out has x's dtype, except isnan/logicalNot: any x dtype, out uint8 (bool).
//       float32/float64: every op; int32/int64/uint8: neg abs sign square relu floor ceil round clamp.
//   binary(op: string, a: View, b: View, out: View)     // a, b broadcast to out's shape, same dtype
//       out has a's dtype, except the comparisons and logicalAnd/Or: out uint8 (bool).
//       uint8 takes add/sub/mul/maximum/minimum and the predicates only.
//   where(cond: View(u8), a: View, b: View, out: View)  // any dtype (a bit copy)
//   reduce(op: "sum"|"prod"|"max"|"min", x: View, dims: number[], out: View)
//       out contiguous, x's shape with dims set to 1; its dtype may differ from x's (cast on store,
//       e.g. bool -> int64 sums). Floats accumulate in float64, integers in int64.
//   argReduce(op: "argmax"|"argmin", x: View, dim: number, out: View(i64))
//   matmul(a: View[...,M,K], b: View[...,K,N], out: View[...,M,N], accumulate?: boolean)  // one rank >= 3;
//       batch dims any strides, 1 broadcasts; accumulate: out += a @ b
//   softmax(x: View, dim: number, log: boolean, out: View)     // float32/float64
//   maskedSoftmax(x: View[..., T, S], mask: View(u8)[T, S], divisor: number, out: View)
//       softmax(where(mask, -inf, x / divisor)) along the last dim; x contiguous, mask contiguous
//   layerNorm(x: View[*, D] contiguous, weight: View[D]|null, bias: View[D]|null, eps: number,
//             out: View, mean: View[rows]|null, rstd: View[rows]|null)  // biased variance
//   indexSelect(x, dim, index(i64|i32, 1-D), out); gather(x, dim, index, out); scatterAdd(dst, dim, index, src)
//       bad index: RangeError "index 5 is out of bounds for dimension 0 with size 3", nothing written.
//   adamStep(p, grad, expAvg, expAvgSq, maxExpAvgSq|null, decay, l2, beta1, oneMinusBeta1, beta2, oneMinusBeta2,
//            bc2Sqrt, eps, negStepSize, maximize)   // in place; contiguous, one float dtype (fused.cc)
//   sgdStep(p, grad, buf|null, lr, momentum, dampening, weightDecay, nesterov, maximize, first)  // likewise
//   layerNormBackward(g, x, mean, rstd, weight|null, gx|null, gw|null, gb|null)  // [rows, D] contiguous
//   softmaxBackward(y, g, log: boolean, gx)   // along the last dim, contiguous, one float dtype
//   copy(src: View, dst: View)  (casts among f32/f64/i32/i64/u8 as typed-array stores do); fill(dst: View, value: number)
//   simdIsa(): "avx512"|"avx2"|"scalar"; setSimdIsa(name): boolean   (the float32 vector kernels; tests)
//   setBlasThreads(n); getBlasThreads()   (OpenBLAS's pool; matmul resyncs it when getNumThreads() changes)
// `out` is always contiguous and allocated by the caller. Ops are named as in
// sdk/tensor/backend/interface.ts. Unknown ops and unsupported dtypes throw a TypeError.
#pragma once
#include <napi.h>

namespace tprpc {
void RegisterElementwise(Napi::Env env, Napi::Object exports);
void RegisterReduce(Napi::Env env, Napi::Object exports);
void RegisterMatmul(Napi::Env env, Napi::Object exports);
void RegisterSoftmax(Napi::Env env, Napi::Object exports);
void RegisterIndexing(Napi::Env env, Napi::Object exports);
void RegisterCopy(Napi::Env env, Napi::Object exports);
void RegisterFused(Napi::Env env, Napi::Object exports);
}  // namespace tprpc
