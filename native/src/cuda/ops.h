// The CUDA dispatch code (ops.cc): one method per Backend kernel of
// sdk/tensor/backend/interface.ts, each building a parameter struct and a
// launch shape and handing them to the launcher. binding.cc parses the JS
// arguments into Views and calls these.
#pragma once
#include <napi.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/launcher.h"
#include "cuda/params.h"

namespace tprpc {
namespace cuda {

// An out-of-range index found by an index kernel (JS: IndexError).
struct IndexOutOfRange : std::runtime_error {
  using std::runtime_error::runtime_error;
};

View ToView(const Napi::Value& value);  // null / undefined: an absent view (ptr 0)
void SetContig(View& v);
long long Numel(const View& v);
View Flat(const View& v, long long n);

class Dispatcher {
 public:
  explicit Dispatcher(std::unique_ptr<Launcher> launcher);
  Launcher& launcher() { return *launcher_; }
  // false: matmul always runs the tk_matmul kernel (tests check both paths on the emulated device).
  void set_use_blas(bool on) { use_blas_ = on; }

  // Index errors. An index kernel records a bad index on the device (launcher.h's error word) and
  // the op returns without waiting for it, as PyTorch's CUDA ops do: reading the word back is a
  // device synchronization, which would stall every embedding and cross-entropy. The error is
  // thrown (IndexOutOfRange) by CheckErrors, which the JS side calls after each synchronization
  // (a blocking copy to the host, synchronize()); with launch blocking on (CUDA_LAUNCH_BLOCKING=1
  // at load, or set_launch_blocking) it is read right after the launch, and the op throws.
  void set_launch_blocking(bool on) { launch_blocking_ = on; }
  void CheckErrors(int device);

  void Copy(int device, const View& src, const View& dst);
  void Fill(int device, const View& dst, double value);
  void Unary(int device, int op, const View& x, const View& out, double s0, double s1);
  void Binary(int device, int op, const View& a, const View& b, const View& out);
  void Where(int device, const View& c, const View& a, const View& b, const View& out);
  void Reduce(int device, int op, const View& x, const std::vector<int>& dims, const View& out);
  void ArgReduce(int device, bool argmin, const View& x, int dim, const View& out);
  void Matmul(int device, const View& a, const View& b, const View& out, bool accumulate);
  void Softmax(int device, const View& x, int dim, bool log, const View& out);
  void MaskedSoftmax(int device, const View& x, const View& mask, double divisor, const View& out);
  void SoftmaxBackward(int device, const View& y, const View& g, int dim, bool log, const View& out);
  void IndexSelect(int device, const View& x, int dim, const View& index, const View& out);
  void Gather(int device, const View& x, int dim, const View& index, const View& out);
  void ScatterAdd(int device, const View& dst, int dim, const View& index, const View& src);
  void LayerNorm(int device, const View& x, const View& w, const View& b, double eps, const View& out,
                 const View& mean, const View& rstd);
  void LayerNormBackward(int device, const View& g, const View& x, const View& mean, const View& rstd,
                         const View& w, const View& gx, const View& gw, const View& gb);
  void AdamStep(int device, const AdamParams& p);

 private:
  template <typename P>
  void Run(int device, const std::string& name, unsigned grid, unsigned block, const P& p);
  static RowParams Rows(const View& a, int dim);
  void IndexLaunched(int device);

  std::unique_ptr<Launcher> launcher_;
  bool use_blas_ = true;
  bool launch_blocking_ = false;
  std::vector<bool> index_pending_;  // by device: an index kernel ran since the last check
};

}  // namespace cuda
}  // namespace tprpc
