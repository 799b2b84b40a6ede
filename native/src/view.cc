// Parsing of JS view objects into tprpc::View (JS thread).
#include "view.h"

namespace tprpc {

bool View::contiguous() const {
  int64_t expected = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

static std::vector<int64_t> ParseInts(const Napi::Value& v, const char* what, const char* field) {
  if (!v.IsArray()) throw Napi::TypeError::New(v.Env(), std::string(what) + "." + field + " must be an array");
  auto arr = v.As<Napi::Array>();
  std::vector<int64_t> out(arr.Length());
  for (uint32_t i = 0; i < arr.Length(); ++i) out[i] = arr.Get(i).As<Napi::Number>().Int64Value();
  return out;
}

View ParseView(const Napi::Value& v, const char* what) {
  Napi::Env env = v.Env();
  if (!v.IsObject()) throw Napi::TypeError::New(env, std::string(what) + " must be a view object");
  auto o = v.As<Napi::Object>();
  Napi::Value data = o.Get("data");
  if (!data.IsTypedArray()) throw Napi::TypeError::New(env, std::string(what) + ".data must be a TypedArray");
  auto ta = data.As<Napi::TypedArray>();
  View view;
  switch (ta.TypedArrayType()) {
    case napi_float32_array: view.dtype = DType::F32; break;
    case napi_float64_array: view.dtype = DType::F64; break;
    case napi_int32_array: view.dtype = DType::I32; break;
    case napi_bigint64_array: view.dtype = DType::I64; break;
    case napi_uint8_array: view.dtype = DType::U8; break;
    default: throw Napi::TypeError::New(env, std::string(what) + ": unsupported TypedArray type");
  }
  // NB: the typed array may itself be a subarray; point at its first element.
  view.data = static_cast<uint8_t*>(ta.ArrayBuffer().Data()) + ta.ByteOffset();
  view.offset = o.Get("offset").As<Napi::Number>().Int64Value();
  view.shape = ParseInts(o.Get("shape"), what, "shape");
  view.strides = ParseInts(o.Get("strides"), what, "strides");
  if (view.shape.size() != view.strides.size())
    throw Napi::TypeError::New(env, std::string(what) + ": shape and strides differ in length");
  // Bounds: the furthest element reachable must lie inside the typed array.
  int64_t lo = view.offset, hi = view.offset;
  for (size_t i = 0; i < view.shape.size(); ++i) {
    if (view.shape[i] == 0) { lo = hi = view.offset; break; }
    int64_t span = (view.shape[i] - 1) * view.strides[i];
    if (span < 0) lo += span; else hi += span;
  }
  if (view.numel() > 0 && (lo < 0 || hi >= static_cast<int64_t>(ta.ElementLength())))
    throw Napi::RangeError::New(env, std::string(what) + ": view reaches outside its storage");
  return view;
}

}  // namespace tprpc
