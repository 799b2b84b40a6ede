// Reductions: reduce (sum/prod/max/min over a sorted set of dims) and
// argReduce (argmax/argmin along one dim, first occurrence). As in the
// TypeScript reference, float inputs accumulate in float64 and max/min let a
// NaN win; integer inputs accumulate in int64. After size-1 dims are dropped
// and contiguous neighbours merged, three shapes of work remain:
//   rows    - the reduced dims merge into one contiguous run (row sums),
//   columns - the kept dims merge into one contiguous run (column sums, e.g.
//             a bias gradient over leading dims),
//   general - an odometer over the reduced dims for each output element.
// Threads: parsing on the JS thread; the loops run on the pool (ParallelFor).
#include <algorithm>
#include <limits>
#include <type_traits>

#include "kernels/common.h"
#include "kernels/kernels.h"
#include "kernels/vmath.h"

namespace tprpc {
namespace kern {
namespace {

enum Kind { kSum, kProd, kMax, kMin };

template <int K, typename A>
inline A Init() {
  if constexpr (K == kSum) return A(0);
  else if constexpr (K == kProd) return A(1);
  else if constexpr (std::is_floating_point<A>::value) return K == kMax ? -INFINITY : INFINITY;
  else return K == kMax ? std::numeric_limits<A>::lowest() : std::numeric_limits<A>::max();
}

// One accumulation step; for max/min a NaN, once seen, stays.
template <int K, typename A>
inline A Step(A acc, A v) {
  if constexpr (K == kSum) return acc + v;
  else if constexpr (K == kProd) return acc * v;
  else if constexpr (K == kMax) return (v != v || v > acc) ? (acc != acc ? acc : v) : acc;
  else return (v != v || v < acc) ? (acc != acc ? acc : v) : acc;
}

// Reduces n elements at p with stride s.
template <int K, typename A, typename T>
inline A ReduceRun(const T* p, int64_t s, int64_t n) {
  if constexpr (K == kSum) {
    if (s == 1) {  // four chains so the adds overlap
      A a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      int64_t i = 0;
      for (; i + 4 <= n; i += 4) {
        a0 += static_cast<A>(p[i]);
        a1 += static_cast<A>(p[i + 1]);
        a2 += static_cast<A>(p[i + 2]);
        a3 += static_cast<A>(p[i + 3]);
      }
      for (; i < n; ++i) a0 += static_cast<A>(p[i]);
      return (a0 + a1) + (a2 + a3);
    }
  }
  A acc = Init<K, A>();
  for (int64_t i = 0; i < n; ++i) acc = Step<K, A>(acc, static_cast<A>(p[i * s]));
  return acc;
}

// The coalesced problem: kept dims (row-major order of out) and reduced dims, each with x strides.
struct Plan {
  std::vector<int64_t> keptShape, keptStride, redShape, redStride;
  int64_t m = 1, r = 1;   // output elements, elements reduced into each
};

Plan MakePlan(const View& x, const std::vector<bool>& reduced) {
  Plan p;
  int last = -1;  // kind of the previous dim kept: 0 kept, 1 reduced
  for (int d = 0; d < x.ndim(); ++d) {
    const int64_t n = x.shape[d], s = x.strides[d];
    const bool red = reduced[d];
    (red ? p.r : p.m) *= n;
    if (n == 1) continue;
    auto& shape = red ? p.redShape : p.keptShape;
    auto& stride = red ? p.redStride : p.keptStride;
    if (last == static_cast<int>(red) && stride.back() == s * n) {
      shape.back() *= n;
      stride.back() = s;
    } else {
      shape.push_back(n);
      stride.push_back(s);
    }
    last = red;
  }
  return p;
}

// Offset (relative) of linear index i in a row-major (shape, stride) space.
inline int64_t OffsetOf(const std::vector<int64_t>& shape, const std::vector<int64_t>& stride, int64_t i) {
  int64_t off = 0;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    off += (i % shape[d]) * stride[d];
    i /= shape[d];
  }
  return off;
}

// Calls f(offset) for each element of a (shape, stride) space, in row-major order, from linear index b to e.
template <typename F>
inline void Walk(const std::vector<int64_t>& shape, const std::vector<int64_t>& stride, int64_t b, int64_t e, F&& f) {
  if (shape.empty()) {
    if (b < e) f(int64_t(0));
    return;
  }
  const int nd = static_cast<int>(shape.size());
  std::vector<int64_t> idx(nd);
  int64_t rest = b, off = 0;
  for (int d = nd - 1; d >= 0; --d) {
    idx[d] = rest % shape[d];
    rest /= shape[d];
    off += idx[d] * stride[d];
  }
  for (int64_t i = b; i < e; ++i) {
    f(off);
    for (int d = nd - 1; d >= 0; --d) {
      off += stride[d];
      if (++idx[d] < shape[d]) break;
      off -= idx[d] * stride[d];
      idx[d] = 0;
    }
  }
}

// Reduces into acc[m] (contiguous, out's element order).
template <int K, typename A, typename T>
void ReduceInto(const View& x, const Plan& p, A* acc) {
  const T* base = static_cast<const T*>(x.data) + x.offset;
  const int nt = NumThreads();
  // NB: both layouts are correct wherever the reduced dims sit; they are just the fast ones.
  const bool rows = p.redShape.size() == 1 && p.redStride[0] == 1;
  const bool cols = !p.redShape.empty() && p.keptShape.size() == 1 && p.keptStride[0] == 1;
  const int64_t r1 = std::max<int64_t>(1, p.r);
  const vmath::F32Kernels& vk = vmath::F32();
  auto rowReduce = [&](const T* q, int64_t n) -> A {
    if constexpr (std::is_same<T, float>::value && std::is_same<A, double>::value) {
      if (K == kSum) return vk.sum(q, n);
      if (K == kMax || K == kMin) {
        bool nan = false;
        float v = K == kMax ? vk.max(q, n, &nan) : vk.min(q, n, &nan);
        return nan ? NAN : v;
      }
    }
    return ReduceRun<K, A>(q, 1, n);
  };

  if (p.redShape.empty()) {  // nothing to reduce: a cast copy
    ParallelFor(p.m, kGrain, [&](int64_t b, int64_t e) {
      int64_t i = b;
      Walk(p.keptShape, p.keptStride, b, e, [&](int64_t off) { acc[i++] = Step<K, A>(Init<K, A>(), A(base[off])); });
    });
  } else if (rows && p.m < 2 * nt && p.m * p.r > kGrain) {
    // Few long rows: split each row across the pool and combine the partial results in order.
    const int64_t chunks = std::min<int64_t>(4 * nt, (p.r + kGrain - 1) / kGrain);
    const int64_t step = (p.r + chunks - 1) / chunks;
    std::vector<A> part(chunks);
    for (int64_t o = 0; o < p.m; ++o) {
      const T* row = base + OffsetOf(p.keptShape, p.keptStride, o);
      ParallelFor(chunks, 1, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) {
          int64_t lo = c * step, hi = std::min(p.r, lo + step);
          part[c] = lo < hi ? rowReduce(row + lo, hi - lo) : Init<K, A>();
        }
      });
      A a = Init<K, A>();
      for (auto v : part) a = Step<K, A>(a, v);
      acc[o] = a;
    }
  } else if (rows) {
    ParallelFor(p.m, std::max<int64_t>(1, kGrain / r1), [&](int64_t b, int64_t e) {
      int64_t o = b;
      Walk(p.keptShape, p.keptStride, b, e, [&](int64_t off) { acc[o++] = rowReduce(base + off, p.r); });
    });
  } else if (cols) {
    // acc[j] = reduce_i x[off(i) + j]. Split the columns when there are many, else the rows with partials.
    const int64_t M = p.m;
    auto colBlock = [&](A* dst, int64_t j0, int64_t j1, int64_t i0, int64_t i1) {
      for (int64_t j = j0; j < j1; ++j) dst[j - j0] = Init<K, A>();
      Walk(p.redShape, p.redStride, i0, i1, [&](int64_t off) {
        const T* q = base + off + j0;
        if constexpr (K == kSum && std::is_same<T, float>::value && std::is_same<A, double>::value) {
          vk.accumulate(q, dst, j1 - j0);
        } else {
          for (int64_t j = 0; j < j1 - j0; ++j) dst[j] = Step<K, A>(dst[j], static_cast<A>(q[j]));
        }
      });
    };
    if (M >= 1024 * nt || M * p.r <= kGrain) {
      constexpr int64_t kBlock = 1024;  // a block of float64 accumulators stays in L1
      const int64_t blocks = (M + kBlock - 1) / kBlock;
      ParallelFor(blocks, std::max<int64_t>(1, kGrain / (kBlock * r1)), [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) colBlock(acc + k * kBlock, k * kBlock, std::min(M, (k + 1) * kBlock), 0, p.r);
      });
    } else {
      const int64_t chunks = std::min<int64_t>(4 * nt, std::max<int64_t>(1, p.r * M / kGrain));
      const int64_t step = (p.r + chunks - 1) / chunks;
      std::vector<A> part(chunks * M);
      ParallelFor(chunks, 1, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) colBlock(part.data() + c * M, 0, M, c * step, std::min(p.r, (c + 1) * step));
      });
      for (int64_t j = 0; j < M; ++j) acc[j] = part[j];
      for (int64_t c = 1; c < chunks; ++c)
        for (int64_t j = 0; j < M; ++j) acc[j] = Step<K, A>(acc[j], part[c * M + j]);
    }
  } else {
    // General: for each output element, walk the reduced dims (innermost run strided).
    const int64_t innerN = p.redShape.back(), innerS = p.redStride.back();
    std::vector<int64_t> outerShape(p.redShape.begin(), p.redShape.end() - 1),
        outerStride(p.redStride.begin(), p.redStride.end() - 1);
    const int64_t outerN = p.r / std::max<int64_t>(1, innerN);
    ParallelFor(p.m, std::max<int64_t>(1, kGrain / r1), [&](int64_t b, int64_t e) {
      int64_t o = b;
      Walk(p.keptShape, p.keptStride, b, e, [&](int64_t koff) {
        A a = Init<K, A>();
        Walk(outerShape, outerStride, 0, outerN, [&](int64_t roff) {
          a = Step<K, A>(a, ReduceRun<K, A>(base + koff + roff, innerS, innerN));
        });
        acc[o++] = a;
      });
    });
  }
}

// Reduces x (elements T) into out (elements O) through an accumulator of A.
template <int K, typename T, typename O>
void ReduceTyped(const View& x, const Plan& plan, const View& out) {
  using A = std::conditional_t<std::is_floating_point<T>::value, double, int64_t>;
  O* dst = static_cast<O*>(out.data) + out.offset;
  if constexpr (std::is_same<A, O>::value) {
    ReduceInto<K, A, T>(x, plan, dst);
  } else {
    std::vector<A> acc(plan.m);
    ReduceInto<K, A, T>(x, plan, acc.data());
    ParallelFor(plan.m, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dst[i] = Cast<O>(acc[i]);
    });
  }
}

// reduce(op, x, dims, out): out has x's shape with `dims` set to 1 and is contiguous.
Napi::Value Reduce(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string op = OpString(info, 0, "reduce");
  int kind;
  if (op == "sum") kind = kSum;
  else if (op == "prod") kind = kProd;
  else if (op == "max") kind = kMax;
  else if (op == "min") kind = kMin;
  else ThrowType(env, "reduce: unknown op \"" + op + "\"");
  View x = ParseView(info[1], "x");
  if (!info[2].IsArray()) ThrowType(env, "reduce: dims must be an array");
  View out = ParseView(info[3], "out");
  std::vector<bool> reduced(x.ndim(), false);
  auto dims = info[2].As<Napi::Array>();
  for (uint32_t i = 0; i < dims.Length(); ++i) {
    int64_t d = dims.Get(i).As<Napi::Number>().Int64Value();
    if (d < 0 || d >= x.ndim()) throw Napi::RangeError::New(env, "reduce: dim " + std::to_string(d) + " out of range");
    reduced[d] = true;
  }
  std::vector<int64_t> kept = x.shape;
  for (int d = 0; d < x.ndim(); ++d)
    if (reduced[d]) kept[d] = 1;
  CheckShape(env, out, kept, "reduce", "out");
  if (!out.contiguous()) ThrowType(env, "reduce: out must be contiguous");
  const Plan plan = MakePlan(x, reduced);

  auto run = [&](auto kc) {
    DispatchAll(x.dtype, [&](auto t) {
      DispatchAll(out.dtype, [&](auto o) { ReduceTyped<decltype(kc)::value, decltype(t), decltype(o)>(x, plan, out); });
    });
  };
  switch (kind) {
    case kSum: run(std::integral_constant<int, kSum>{}); break;
    case kProd: run(std::integral_constant<int, kProd>{}); break;
    case kMax: run(std::integral_constant<int, kMax>{}); break;
    default: run(std::integral_constant<int, kMin>{}); break;
  }
  return env.Undefined();
}

// argReduce(op, x, dim, out): index (int64) of the first max/min along dim; a NaN wins.
template <bool IsMax, typename T>
void ArgRows(const View& x, int dim, const View& out) {
  std::vector<int64_t> oshape = x.shape;
  oshape[dim] = 1;
  Iter<2> it = MakeIter<2>(oshape, {&out, &x});
  const int64_t size = x.shape[dim], sd = x.strides[dim];
  const int64_t so = it.innerStride(0), sx = it.innerStride(1);
  ParallelRows<2>(
      it,
      [&](const std::array<int64_t, 2>& off, int64_t n) {
        int64_t* po = static_cast<int64_t*>(out.data) + off[0];
        const T* px = static_cast<const T*>(x.data) + off[1];
        for (int64_t j = 0; j < n; ++j) {
          const T* q = px + j * sx;
          int64_t best = 0;
          T bv = q[0];
          for (int64_t k = 1; k < size && bv == bv; ++k) {
            const T v = q[k * sd];
            if (v != v || (IsMax ? v > bv : v < bv)) {
              bv = v;
              best = k;
            }
          }
          po[j * so] = best;
        }
      },
      std::max<int64_t>(1, kGrain / std::max<int64_t>(1, size)));
}

Napi::Value ArgReduce(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string op = OpString(info, 0, "argReduce");
  if (op != "argmax" && op != "argmin") ThrowType(env, "argReduce: unknown op \"" + op + "\"");
  View x = ParseView(info[1], "x");
  const int64_t dim = IntArg(info, 2, "argReduce", "dim");
  View out = ParseView(info[3], "out");
  if (x.ndim() == 0 && out.ndim() == 0) {  // NB: as in the reference, a 0-d x is one row of one
    x.shape = out.shape = {1};
    x.strides = out.strides = {1};
  }
  if (dim < 0 || dim >= x.ndim()) throw Napi::RangeError::New(env, "argReduce: dim out of range");
  if (x.shape[dim] == 0) throw Napi::RangeError::New(env, "argReduce: the reduced dim is empty");
  if (out.dtype != DType::I64) ThrowType(env, "argReduce: out must be int64");
  std::vector<int64_t> oshape = x.shape;
  oshape[dim] = 1;
  CheckShape(env, out, oshape, "argReduce", "out");
  const bool isMax = op == "argmax";
  DispatchAll(x.dtype, [&](auto t) {
    using T = decltype(t);
    if (isMax) ArgRows<true, T>(x, static_cast<int>(dim), out);
    else ArgRows<false, T>(x, static_cast<int>(dim), out);
  });
  return env.Undefined();
}

}  // namespace
}  // namespace kern

void RegisterReduce(Napi::Env env, Napi::Object exports) {
  exports.Set("reduce", Napi::Function::New(env, kern::Reduce));
  exports.Set("argReduce", Napi::Function::New(env, kern::ArgReduce));
}

}  // namespace tprpc
