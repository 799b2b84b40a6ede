// The addon's cudaKernels(mode) namespace: the CUDA kernel backend's entry
// points (sdk/tensor/backend/cuda/kernels.ts), bound to one Dispatcher per mode:
//   "emulate"  host-compiled kernels over host memory (TPRPC_CUDA=emulate); the
//              namespace also carries that device's memory functions, the same
//              ones sdk/native/gpu.ts has for a real device (CudaMemoryApi), and
//              its block tracker (gpu/block_tracker.h: trackBlock, sweepBlocks);
//   "device"   the embedded fatbin on the CUDA driver; ENOTVIABLE with the
//              reason when this addon has no fatbin or no GPU is visible.
// Errors: IndexError-worthy indices give NativeError code "EINDEX", bad
// arguments "EINVAL", driver failures "ECUDA".
// Thread: JS thread.
#include <napi.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "cuda/ops.h"
#include "errors.h"
#include "napi_bigint.h"
#include "gpu/block_tracker.h"
#include "kernels/ops.h"

namespace tprpc {
namespace cuda {
namespace {

using Fn = void (*)(const Napi::CallbackInfo&, Dispatcher&);

int I(const Napi::CallbackInfo& info, size_t i) { return info[i].As<Napi::Number>().Int32Value(); }
double D(const Napi::CallbackInfo& info, size_t i) { return info[i].As<Napi::Number>().DoubleValue(); }
bool B(const Napi::CallbackInfo& info, size_t i) { return info[i].ToBoolean().Value(); }
View V(const Napi::CallbackInfo& info, size_t i) { return ToView(info[i]); }

template <Fn F>
Napi::Value Call(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* d = static_cast<Dispatcher*>(info.Data());
  try {
    F(info, *d);
  } catch (const IndexOutOfRange& e) {
    ThrowNative(env, "EINDEX", 0, e.what());
  } catch (const std::invalid_argument& e) {
    ThrowNative(env, "EINVAL", 0, e.what());
  } catch (const Napi::Error&) {
    throw;
  } catch (const std::exception& e) {
    ThrowNative(env, "ECUDA", 0, std::string("CUDA kernel backend (") + d->launcher().Mode() + "): " + e.what());
  }
  return env.Undefined();
}

void Copy(const Napi::CallbackInfo& i, Dispatcher& d) { d.Copy(I(i, 0), V(i, 1), V(i, 2)); }
void Fill(const Napi::CallbackInfo& i, Dispatcher& d) { d.Fill(I(i, 0), V(i, 1), D(i, 2)); }

void Unary(const Napi::CallbackInfo& i, Dispatcher& d) {
  kern::UOp op;
  if (!kern::ParseUOp(i[1].As<Napi::String>().Utf8Value(), &op)) throw std::invalid_argument("unknown unary op");
  d.Unary(I(i, 0), static_cast<int>(op), V(i, 2), V(i, 3), D(i, 4), D(i, 5));
}

void Binary(const Napi::CallbackInfo& i, Dispatcher& d) {
  kern::BOp op;
  if (!kern::ParseBOp(i[1].As<Napi::String>().Utf8Value(), &op)) throw std::invalid_argument("unknown binary op");
  d.Binary(I(i, 0), static_cast<int>(op), V(i, 2), V(i, 3), V(i, 4));
}

void Where(const Napi::CallbackInfo& i, Dispatcher& d) { d.Where(I(i, 0), V(i, 1), V(i, 2), V(i, 3), V(i, 4)); }

void Reduce(const Napi::CallbackInfo& i, Dispatcher& d) {
  auto arr = i[3].As<Napi::Array>();
  std::vector<int> dims;
  for (uint32_t k = 0; k < arr.Length(); ++k) dims.push_back(arr.Get(k).As<Napi::Number>().Int32Value());
  d.Reduce(I(i, 0), I(i, 1), V(i, 2), dims, V(i, 4));
}

void ArgReduce(const Napi::CallbackInfo& i, Dispatcher& d) { d.ArgReduce(I(i, 0), B(i, 1), V(i, 2), I(i, 3), V(i, 4)); }
void Matmul(const Napi::CallbackInfo& i, Dispatcher& d) { d.Matmul(I(i, 0), V(i, 1), V(i, 2), V(i, 3), B(i, 4)); }
void Softmax(const Napi::CallbackInfo& i, Dispatcher& d) { d.Softmax(I(i, 0), V(i, 1), I(i, 2), B(i, 3), V(i, 4)); }
void MaskedSoftmax(const Napi::CallbackInfo& i, Dispatcher& d) {
  d.MaskedSoftmax(I(i, 0), V(i, 1), V(i, 2), D(i, 3), V(i, 4));
}
void SoftmaxBackward(const Napi::CallbackInfo& i, Dispatcher& d) {
  d.SoftmaxBackward(I(i, 0), V(i, 1), V(i, 2), I(i, 3), B(i, 4), V(i, 5));
}
void IndexSelect(const Napi::CallbackInfo& i, Dispatcher& d) {
  d.IndexSelect(I(i, 0), V(i, 1), I(i, 2), V(i, 3), V(i, 4));
}
void Gather(const Napi::CallbackInfo& i, Dispatcher& d) { d.Gather(I(i, 0), V(i, 1), I(i, 2), V(i, 3), V(i, 4)); }
void ScatterAdd(const Napi::CallbackInfo& i, Dispatcher& d) {
  d.ScatterAdd(I(i, 0), V(i, 1), I(i, 2), V(i, 3), V(i, 4));
}
void LayerNorm(const Napi::CallbackInfo& i, Dispatcher& d) {
  d.LayerNorm(I(i, 0), V(i, 1), V(i, 2), V(i, 3), D(i, 4), V(i, 5), V(i, 6), V(i, 7));
}
void LayerNormBackward(const Napi::CallbackInfo& i, Dispatcher& d) {
  d.LayerNormBackward(I(i, 0), V(i, 1), V(i, 2), V(i, 3), V(i, 4), V(i, 5), V(i, 6), V(i, 7), V(i, 8));
}

// adamStep(device, p, g, m, v, vmax | null, Float64Array [decay, l2, beta1, 1-beta1, beta2, 1-beta2,
// bc2Sqrt, eps, negStepSize], maximize)
void AdamStep(const Napi::CallbackInfo& i, Dispatcher& d) {
  AdamParams p{};
  p.p = V(i, 1);
  p.g = V(i, 2);
  p.m = V(i, 3);
  p.v = V(i, 4);
  p.vmax = V(i, 5);
  auto h = i[6].As<Napi::Float64Array>();
  if (h.ElementLength() != 9) throw std::invalid_argument("adamStep takes 9 scalars");
  p.decay = h[0];
  p.l2 = h[1];
  p.beta1 = h[2];
  p.omb1 = h[3];
  p.beta2 = h[4];
  p.omb2 = h[5];
  p.bc2sqrt = h[6];
  p.eps = h[7];
  p.negstep = h[8];
  p.maximize = B(i, 7) ? 1 : 0;
  p.n = Numel(p.p);
  d.AdamStep(I(i, 0), p);
}

void SetUseBlas(const Napi::CallbackInfo& i, Dispatcher& d) { d.set_use_blas(B(i, 0)); }
void SetLaunchBlocking(const Napi::CallbackInfo& i, Dispatcher& d) { d.set_launch_blocking(B(i, 0)); }
void CheckErrors(const Napi::CallbackInfo& i, Dispatcher& d) { d.CheckErrors(I(i, 0)); }

// ---- the emulated device's memory (host memory; "device pointers" are host addresses) --------------
std::mutex g_emu_mem_mutex;
std::map<unsigned long long, size_t> g_emu_blocks;  // guarded by g_emu_mem_mutex
size_t g_emu_in_use = 0;
constexpr double kEmuTotal = 16.0 * (1ull << 30);  // what memInfo reports as the device's size

unsigned long long Addr(const Napi::Value& v) {
  return BigIntU64(v);
}

std::pair<uint8_t*, size_t> Bytes(const Napi::Value& v) {
  auto view = v.As<Napi::TypedArray>();
  return {static_cast<uint8_t*>(view.ArrayBuffer().Data()) + view.ByteOffset(), view.ByteLength()};
}

Napi::Value EmuAlloc(const Napi::CallbackInfo& info) {
  const size_t n = static_cast<size_t>(info[1].As<Napi::Number>().Int64Value());
  void* p = std::aligned_alloc(256, (n + 255) / 256 * 256);
  if (p == nullptr) ThrowNative(info.Env(), "ENOMEM", 0, "emulated cuMemAlloc of " + std::to_string(n) + " bytes failed");
  std::lock_guard<std::mutex> lock(g_emu_mem_mutex);
  g_emu_blocks[reinterpret_cast<unsigned long long>(p)] = n;
  g_emu_in_use += n;
  return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)));
}

// Frees the block at p; its size, or 0 when p was not allocated here.
size_t EmuFreeBlock(unsigned long long p) {
  std::lock_guard<std::mutex> lock(g_emu_mem_mutex);
  auto it = g_emu_blocks.find(p);
  if (it == g_emu_blocks.end()) return 0;
  const size_t n = it->second;
  g_emu_in_use -= n;
  g_emu_blocks.erase(it);
  std::free(reinterpret_cast<void*>(p));
  return n;
}

// memFree(device, ptr) -> the bytes freed
Napi::Value EmuFree(const Napi::CallbackInfo& info) {
  const size_t n = EmuFreeBlock(Addr(info[1]));
  if (n == 0) ThrowNative(info.Env(), "EINVAL", 0, "emulated cuMemFree of an address not allocated");
  return Napi::Number::New(info.Env(), static_cast<double>(n));
}

// The block tracker's free (gpu/block_tracker.h) for the emulated device.
void EmuFreeTracked(Napi::Env env, int, uint64_t ptr) {
  if (EmuFreeBlock(ptr) == 0) ThrowNative(env, "EINVAL", 0, "emulated cuMemFree of an address not allocated");
}

Napi::Value EmuInfo(const Napi::CallbackInfo& info) {
  auto o = Napi::Object::New(info.Env());
  std::lock_guard<std::mutex> lock(g_emu_mem_mutex);
  o.Set("free", kEmuTotal - static_cast<double>(g_emu_in_use));
  o.Set("total", kEmuTotal);
  return o;
}

Napi::Value EmuHtoD(const Napi::CallbackInfo& info) {
  auto [src, n] = Bytes(info[3]);
  std::memcpy(reinterpret_cast<void*>(Addr(info[1]) + info[2].As<Napi::Number>().Int64Value()), src, n);
  return info.Env().Undefined();
}

Napi::Value EmuDtoH(const Napi::CallbackInfo& info) {
  auto [dst, n] = Bytes(info[3]);
  std::memcpy(dst, reinterpret_cast<const void*>(Addr(info[1]) + info[2].As<Napi::Number>().Int64Value()), n);
  return info.Env().Undefined();
}

// copyDtoD(srcDevice, src, srcOffset, dstDevice, dst, dstOffset, bytes)
Napi::Value EmuDtoD(const Napi::CallbackInfo& info) {
  const auto src = Addr(info[1]) + info[2].As<Napi::Number>().Int64Value();
  const auto dst = Addr(info[4]) + info[5].As<Napi::Number>().Int64Value();
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src),
               static_cast<size_t>(info[6].As<Napi::Number>().Int64Value()));
  return info.Env().Undefined();
}

Dispatcher* g_dispatch[2] = {nullptr, nullptr};  // JS thread: [emulate, device], made once

// cudaKernels(mode) -> the namespace above, or ENOTVIABLE (mode "device" without fatbin or GPU).
Napi::Value Namespace(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string mode = info[0].As<Napi::String>().Utf8Value();
  const bool emulate = mode == "emulate";
  if (!emulate && mode != "device") ThrowNative(env, "EINVAL", 0, "cudaKernels: mode is \"emulate\" or \"device\"");
  Dispatcher*& d = g_dispatch[emulate ? 0 : 1];
  if (d == nullptr) {
    std::unique_ptr<Launcher> l;
    std::string why;
    if (emulate) l = MakeEmulatedLauncher();
    else l = MakeDriverLauncher(&why);
    if (!l) ThrowNative(env, "ENOTVIABLE", 0, "CUDA kernels are not viable here: " + why);
    d = new Dispatcher(std::move(l));  // NB: kept for the process (no teardown order to get wrong)
  }
  auto o = Napi::Object::New(env);
  auto fn = [&](const char* name, Napi::Value (*f)(const Napi::CallbackInfo&)) {
    o.Set(name, Napi::Function::New(env, f, name, d));
  };
  fn("copy", Call<Copy>);
  fn("fill", Call<Fill>);
  fn("unary", Call<Unary>);
  fn("binary", Call<Binary>);
  fn("where", Call<Where>);
  fn("reduce", Call<Reduce>);
  fn("argReduce", Call<ArgReduce>);
  fn("matmul", Call<Matmul>);
  fn("softmax", Call<Softmax>);
  fn("maskedSoftmax", Call<MaskedSoftmax>);
  fn("softmaxBackward", Call<SoftmaxBackward>);
  fn("indexSelect", Call<IndexSelect>);
  fn("gather", Call<Gather>);
  fn("scatterAdd", Call<ScatterAdd>);
  fn("layerNorm", Call<LayerNorm>);
  fn("layerNormBackward", Call<LayerNormBackward>);
  fn("adamStep", Call<AdamStep>);
  fn("setUseBlas", Call<SetUseBlas>);
  fn("setLaunchBlocking", Call<SetLaunchBlocking>);
  fn("checkErrors", Call<CheckErrors>);
  o.Set("mode", Napi::String::New(env, d->launcher().Mode()));
  if (emulate) {
    o.Set("memAlloc", Napi::Function::New(env, EmuAlloc, "memAlloc"));
    o.Set("memFree", Napi::Function::New(env, EmuFree, "memFree"));
    o.Set("memInfo", Napi::Function::New(env, EmuInfo, "memInfo"));
    o.Set("copyHtoD", Napi::Function::New(env, EmuHtoD, "copyHtoD"));
    o.Set("copyDtoH", Napi::Function::New(env, EmuDtoH, "copyDtoH"));
    o.Set("copyDtoD", Napi::Function::New(env, EmuDtoD, "copyDtoD"));
    gpu::AddBlockTracker(env, o, EmuFreeTracked);
  }
  return o;
}

// cudaKernelInfo() -> { hostKernels, fatbinBytes, fatbinReason? }: what this build carries.
Napi::Value Info(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto o = Napi::Object::New(env);
  o.Set("hostKernels", Napi::Number::New(env, static_cast<double>(HostKernelCount())));
  o.Set("fatbinBytes", Napi::Number::New(env, static_cast<double>(FatbinSize())));
  if (FatbinSize() == 0) o.Set("fatbinReason", Napi::String::New(env, FatbinReason()));
  return o;
}

}  // namespace
}  // namespace cuda

void RegisterCudaKernels(Napi::Env env, Napi::Object exports) {
  exports.Set("cudaKernels", Napi::Function::New(env, cuda::Namespace));
  exports.Set("cudaKernelInfo", Napi::Function::New(env, cuda::Info));
}

}  // namespace tprpc
