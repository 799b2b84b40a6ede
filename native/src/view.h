// A strided tensor view as the kernels see it, parsed from the JS object
// { data: TypedArray, offset: number, shape: number[], strides: number[] }
// that sdk/tensor/backend/native passes. Runs on the JS thread (parsing only).
#pragma once
#include <napi.h>

#include <cstdint>
#include <vector>

namespace tprpc {

enum class DType : int { F32 = 0, F64 = 1, I32 = 2, I64 = 3, U8 = 4 };

struct View {
  void* data = nullptr;      // element 0 of the storage (not of the view)
  DType dtype = DType::F32;
  int64_t offset = 0;        // in elements
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements

  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  int ndim() const { return static_cast<int>(shape.size()); }
  bool contiguous() const;
  template <typename T>
  T* ptr() const { return static_cast<T*>(data) + offset; }
};

// Throws a Napi::TypeError naming `what` when the object is not a valid view.
View ParseView(const Napi::Value& v, const char* what);

}  // namespace tprpc
