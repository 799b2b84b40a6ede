// Index kernels: indexSelect, gather and scatterAdd, with torch's
// semantics as the reference implements them: negative indices count from
// the end (-size <= i < size); any other index throws a RangeError "index 5
// is out of bounds for dimension 0 with size 3" (the sdk maps it to
// IndexError) before anything is written. indexSelect and gather copy bits
// (any dtype); scatterAdd adds in dst's dtype.
// Threads: indices are read and checked on the JS thread (errors must be
// thrown there); the copies run on the pool. scatterAdd splits the work by
// the coordinates other than `dim`, so no two threads touch one dst element
// and each element sums its contributions in index order, as the reference.
#include <cstring>

#include "kernels/common.h"
#include "kernels/kernels.h"

namespace tprpc {
namespace kern {
namespace {

[[noreturn]] void OutOfBounds(Napi::Env env, int64_t v, int64_t dim, int64_t size) {
  throw Napi::RangeError::New(env, "index " + std::to_string(v) + " is out of bounds for dimension " +
                                       std::to_string(dim) + " with size " + std::to_string(size));
}

// The view's indices in row-major order, checked against `size` and made non-negative.
std::vector<int64_t> ReadIndices(Napi::Env env, const View& index, int64_t dim, int64_t size) {
  if (index.dtype != DType::I64 && index.dtype != DType::I32)
    ThrowType(env, std::string("index must be int64 or int32, got ") + DTypeName(index.dtype));
  std::vector<int64_t> out(index.numel());
  Iter<1> it = MakeIter<1>(index.shape, {&index});
  const int64_t s = it.innerStride(0);
  int64_t pos = 0;
  auto read = [&](auto* p) {
    ForRows<1>(it, 0, it.numel, [&](const std::array<int64_t, 1>& off, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        int64_t v = static_cast<int64_t>(p[off[0] + i * s]);
        if (v < -size || v >= size) OutOfBounds(env, v, dim, size);
        out[pos++] = v < 0 ? v + size : v;
      }
    });
  };
  if (index.dtype == DType::I64) read(static_cast<const int64_t*>(index.data));
  else read(static_cast<const int32_t*>(index.data));
  return out;
}

// A view with the strides of `v` over the dims of `shape`, its `dim` stride set to 0.
View Based(const View& v, const std::vector<int64_t>& shape, int dim) {
  View r = v;
  r.shape = shape;
  r.strides.assign(v.strides.begin(), v.strides.begin() + shape.size());
  r.strides[dim] = 0;
  return r;
}

View Contiguous(const std::vector<int64_t>& shape) {
  View r;
  r.shape = shape;
  r.strides.assign(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) r.strides[d] = r.strides[d + 1] * shape[d + 1];
  return r;
}

template <typename T>
void IndexSelectCopy(const View& x, int dim, const std::vector<int64_t>& idx, const View& out) {
  // out as [outer, m, inner]: slice (p, k) copies x's inner block at p, idx[k] to out's block p*m + k.
  std::vector<int64_t> outerShape(x.shape.begin(), x.shape.begin() + dim),
      innerShape(x.shape.begin() + dim + 1, x.shape.end());
  View xo = x, xi = x, oi = Contiguous(innerShape);
  xo.shape = outerShape;
  xo.strides.assign(x.strides.begin(), x.strides.begin() + dim);
  xo.offset = 0;
  xi.shape = innerShape;
  xi.strides.assign(x.strides.begin() + dim + 1, x.strides.end());
  xi.offset = 0;
  Iter<1> outer = MakeIter<1>(outerShape, {&xo});
  Iter<2> inner = MakeIter<2>(innerShape, {&oi, &xi});
  const int64_t m = static_cast<int64_t>(idx.size()), innerN = inner.numel, sd = x.strides[dim];
  const int64_t so = inner.innerStride(0), sx = inner.innerStride(1);
  const T* px = static_cast<const T*>(x.data) + x.offset;
  T* po = static_cast<T*>(out.data) + out.offset;
  ParallelFor(outer.numel * m, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, innerN)), [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) {
      const int64_t p = s / m, k = s % m;
      int64_t xoff = idx[k] * sd;
      ForRows<1>(outer, p, p + 1, [&](const std::array<int64_t, 1>& off, int64_t) { xoff += off[0]; });
      const T* src = px + xoff;
      T* dst = po + s * innerN;
      ForRows<2>(inner, 0, innerN, [&](const std::array<int64_t, 2>& off, int64_t n) {
        if (sx == 1 && so == 1) std::memcpy(dst + off[0], src + off[1], n * sizeof(T));
        else
          for (int64_t i = 0; i < n; ++i) dst[off[0] + i * so] = src[off[1] + i * sx];
      });
    }
  });
}

// indexSelect(x, dim, index, out): out is x with dim resized to index's length.
Napi::Value IndexSelect(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  View x = ParseView(info[0], "x");
  const int64_t dim = IntArg(info, 1, "indexSelect", "dim");
  View index = ParseView(info[2], "index"), out = ParseView(info[3], "out");
  if (dim < 0 || dim >= std::max(1, x.ndim())) throw Napi::RangeError::New(env, "indexSelect: dim out of range");
  if (index.ndim() > 1) ThrowType(env, "indexSelect: index must be 1-D");
  if (x.ndim() == 0) {  // NB: as in the reference, a 0-d x acts as a 1-element vector
    if (out.numel() != index.numel()) ThrowType(env, "indexSelect: out has the wrong shape");
    x.shape = {1};
    x.strides = {1};
    out.shape = {index.numel()};
    out.strides = {1};
  }
  std::vector<int64_t> shape = x.shape;
  shape[dim] = index.numel();
  CheckShape(env, out, shape, "indexSelect", "out");
  if (out.dtype != x.dtype || !out.contiguous()) ThrowType(env, "indexSelect: out must be contiguous with x's dtype");
  const std::vector<int64_t> idx = ReadIndices(env, index, dim, x.shape[dim]);
  switch (ItemSize(x.dtype)) {
    case 1: IndexSelectCopy<uint8_t>(x, static_cast<int>(dim), idx, out); break;
    case 4: IndexSelectCopy<uint32_t>(x, static_cast<int>(dim), idx, out); break;
    default: IndexSelectCopy<uint64_t>(x, static_cast<int>(dim), idx, out); break;
  }
  return env.Undefined();
}

// Checks index.shape[d] <= limit.shape[d] for every d (but `dim` when skipDim).
void CheckWithin(Napi::Env env, const View& index, const View& limit, int dim, bool skipDim, const char* fn,
                 const char* what) {
  if (index.ndim() != limit.ndim())
    ThrowType(env, std::string(fn) + ": index must have as many dims as " + what);
  for (int d = 0; d < index.ndim(); ++d)
    if ((!skipDim || d != dim) && index.shape[d] > limit.shape[d])
      throw Napi::RangeError::New(env, std::string(fn) + ": index is larger than " + what + " at dim " +
                                           std::to_string(d));
}

template <typename T>
void GatherCopy(const View& x, int dim, const std::vector<int64_t>& idx, const View& index, const View& out) {
  View xb = Based(x, index.shape, dim), ic = Contiguous(index.shape);
  ic.offset = 0;
  Iter<3> it = MakeIter<3>(index.shape, {&out, &ic, &xb});
  const int64_t so = it.innerStride(0), si = it.innerStride(1), sx = it.innerStride(2), sd = x.strides[dim];
  const T* px = static_cast<const T*>(x.data);
  T* po = static_cast<T*>(out.data);
  ParallelRows<3>(it, [&](const std::array<int64_t, 3>& off, int64_t n) {
    for (int64_t i = 0; i < n; ++i) po[off[0] + i * so] = px[off[2] + i * sx + idx[off[1] + i * si] * sd];
  });
}

// gather(x, dim, index, out): out[i] = x[i with i[dim] = index[i]]; out has index's shape.
Napi::Value Gather(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  View x = ParseView(info[0], "x");
  const int64_t dim = IntArg(info, 1, "gather", "dim");
  View index = ParseView(info[2], "index"), out = ParseView(info[3], "out");
  if (dim < 0 || dim >= x.ndim()) throw Napi::RangeError::New(env, "gather: dim out of range");
  CheckWithin(env, index, x, static_cast<int>(dim), true, "gather", "x");
  CheckShape(env, out, index.shape, "gather", "out");
  if (out.dtype != x.dtype) ThrowType(env, "gather: out must have x's dtype");
  const std::vector<int64_t> idx = ReadIndices(env, index, dim, x.shape[dim]);
  switch (ItemSize(x.dtype)) {
    case 1: GatherCopy<uint8_t>(x, static_cast<int>(dim), idx, index, out); break;
    case 4: GatherCopy<uint32_t>(x, static_cast<int>(dim), idx, index, out); break;
    default: GatherCopy<uint64_t>(x, static_cast<int>(dim), idx, index, out); break;
  }
  return env.Undefined();
}

template <typename T>
void ScatterAddRows(const View& dst, int dim, const std::vector<int64_t>& idx, const View& index, const View& src) {
  // One fiber per position of index with its `dim` coordinate at 0; each walks index's dim in order.
  std::vector<int64_t> fibers = index.shape;
  const int64_t len = index.shape[dim];
  fibers[dim] = 1;
  View db = Based(dst, fibers, dim), ic = Contiguous(index.shape), sv = src;
  ic.offset = 0;
  sv.shape = fibers;
  sv.strides.assign(src.strides.begin(), src.strides.begin() + fibers.size());
  const int64_t icd = ic.strides[dim], ssd = src.strides[dim], dsd = dst.strides[dim];
  Iter<3> it = MakeIter<3>(fibers, {&ic, &db, &sv});
  const int64_t si = it.innerStride(0), sdb = it.innerStride(1), ss = it.innerStride(2);
  T* pd = static_cast<T*>(dst.data);
  const T* ps = static_cast<const T*>(src.data);
  ParallelRows<3>(
      it,
      [&](const std::array<int64_t, 3>& off, int64_t n) {
        for (int64_t j = 0; j < n; ++j) {
          const int64_t io = off[0] + j * si, d0 = off[1] + j * sdb, s0 = off[2] + j * ss;
          for (int64_t k = 0; k < len; ++k) {
            T& t = pd[d0 + idx[io + k * icd] * dsd];
            if constexpr (std::is_integral<T>::value)
              t = static_cast<T>(static_cast<std::make_unsigned_t<T>>(t) + static_cast<std::make_unsigned_t<T>>(ps[s0 + k * ssd]));
            else
              t += ps[s0 + k * ssd];
          }
        }
      },
      std::max<int64_t>(1, kGrain / std::max<int64_t>(1, len)));
}

// The embedding backward's case: 2-D dst and src with contiguous rows, dim 0, and an index that is one
// column broadcast along dim 1 (stride 0), so dst[rows[i], :d] += src[i, :d]. The general walk goes down
// one column at a time (strided, a cache line per element); here each row is one contiguous add, the
// columns split over the pool. Every element still sums its contributions in index order.
template <typename T>
void ScatterAddRowsWhole(const View& dst, const std::vector<int64_t>& rows, const View& src, int64_t d) {
  T* pd = static_cast<T*>(dst.data) + dst.offset;
  const T* ps = static_cast<const T*>(src.data) + src.offset;
  const int64_t n = static_cast<int64_t>(rows.size()), sdr = dst.strides[0], ssr = src.strides[0];
  ParallelFor(d, std::max<int64_t>(16, kGrain / std::max<int64_t>(1, n)), [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n; ++i) {
      T* t = pd + rows[i] * sdr;
      const T* u = ps + i * ssr;
      for (int64_t c = c0; c < c1; ++c) {
        if constexpr (std::is_integral<T>::value)
          t[c] = static_cast<T>(static_cast<std::make_unsigned_t<T>>(t[c]) + static_cast<std::make_unsigned_t<T>>(u[c]));
        else
          t[c] += u[c];
      }
    }
  });
}

// scatterAdd(dst, dim, index, src): in place, dst[i with i[dim] = index[i]] += src[i] for i over index's shape.
Napi::Value ScatterAdd(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  View dst = ParseView(info[0], "dst");
  const int64_t dim = IntArg(info, 1, "scatterAdd", "dim");
  View index = ParseView(info[2], "index"), src = ParseView(info[3], "src");
  if (dim < 0 || dim >= dst.ndim()) throw Napi::RangeError::New(env, "scatterAdd: dim out of range");
  CheckWithin(env, index, dst, static_cast<int>(dim), true, "scatterAdd", "dst");
  CheckWithin(env, index, src, static_cast<int>(dim), false, "scatterAdd", "src");
  if (src.dtype != dst.dtype) ThrowType(env, "scatterAdd: src must have dst's dtype");
  if (dim == 0 && dst.ndim() == 2 && index.ndim() == 2 && src.ndim() == 2 && index.shape[1] > 1 &&
      index.strides[1] == 0 && dst.strides[1] == 1 && src.strides[1] == 1) {
    View column = index;
    column.shape = {index.shape[0]};
    column.strides = {index.strides[0]};
    const std::vector<int64_t> rows = ReadIndices(env, column, 0, dst.shape[0]);
    DispatchAll(dst.dtype, [&](auto t) { ScatterAddRowsWhole<decltype(t)>(dst, rows, src, index.shape[1]); });
    return env.Undefined();
  }
  const std::vector<int64_t> idx = ReadIndices(env, index, dim, dst.shape[dim]);
  if (idx.empty()) return env.Undefined();
  DispatchAll(dst.dtype, [&](auto t) { ScatterAddRows<decltype(t)>(dst, static_cast<int>(dim), idx, index, src); });
  return env.Undefined();
}

}  // namespace
}  // namespace kern

void RegisterIndexing(Napi::Env env, Napi::Object exports) {
  exports.Set("indexSelect", Napi::Function::New(env, kern::IndexSelect));
  exports.Set("gather", Napi::Function::New(env, kern::Gather));
  exports.Set("scatterAdd", Napi::Function::New(env, kern::ScatterAdd));
}

}  // namespace tprpc
