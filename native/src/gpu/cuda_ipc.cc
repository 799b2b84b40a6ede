// The cuda_ipc channel's driver calls (sdk/channel/cuda_ipc/driver.ts, CudaIpcDriver), added to
// the gpu() namespace: IPC handles of device allocations and of interprocess events, events, stream
// waits. Each function is one driver call in `device`'s primary context (made current first), so
// the protocol (sdk/channel/cuda_ipc/protocol.ts) decides the order and caching, not this file.
//
// Pointers, streams and events cross to JS as BigInts; IPC handles as 64-byte Buffers. A driver
// that is not viable throws NativeError "ENOTVIABLE" (from MakeCurrent) with dynlib's reason; a
// failed call throws NativeError "ECUDA" whose errno is the CUresult, so the TS side can map it to
// a typed error (CudaIpcError) that names the call.
//
// NB: no GPU has run these; tests use the stand-in libcuda of test/native/cuda_standin.ts, whose
// IPC handles name shared files, so two real processes can exchange them.
//
// Thread: JS thread (every function here), except eventWait's cuEventSynchronize, which runs on a
// libuv pool thread. None blocks for long except eventSynchronize (the channel uses eventWait).
#include <cstring>
#include <string>

#include "errors.h"
#include "napi_bigint.h"
#include "gpu/caching_allocator.h"
#include "gpu/cuda_memory.h"

namespace tprpc {
namespace gpu {
namespace {

int Dev(const Napi::Value& v) { return v.As<Napi::Number>().Int32Value(); }
template <typename T>
T* Handle(const Napi::Value& v) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(BigIntU64(v)));
}
Napi::BigInt Big(Napi::Env env, uint64_t v) { return Napi::BigInt::New(env, v); }
template <typename T>
Napi::BigInt BigOf(Napi::Env env, T* p) {
  return Big(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)));
}

// Throws NativeError "ECUDA" (errno = the CUresult) unless rc is CUDA_SUCCESS.
void Check(Napi::Env env, const CudaDriver& d, CUresult rc, const char* call) {
  if (rc != CUDA_SUCCESS) throw NativeResultError(env, "ECUDA", rc, std::string(call) + " failed: " + CuErrorText(d, rc));
}

// A 64-byte IPC handle from a Buffer/Uint8Array argument; EINVAL when it has another length.
template <typename H>
H HandleBytes(Napi::Env env, const Napi::Value& v, const char* what) {
  H h;
  if (!v.IsTypedArray()) ThrowNative(env, "EINVAL", 0, std::string(what) + " must be a Uint8Array");
  auto view = v.As<Napi::TypedArray>();
  if (view.ByteLength() != sizeof h.reserved)
    ThrowNative(env, "EINVAL", 0,
                std::string(what) + " has " + std::to_string(sizeof h.reserved) + " bytes, got " +
                    std::to_string(view.ByteLength()));
  std::memcpy(h.reserved, static_cast<uint8_t*>(view.ArrayBuffer().Data()) + view.ByteOffset(), sizeof h.reserved);
  return h;
}

// ipcAddressRange(device, ptr) -> { base, size }: the allocation (caching-allocator segment) holding ptr.
Napi::Value IpcAddressRange(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]));
  CUdeviceptr base = 0;
  size_t size = 0;
  Check(env, d, d.cuMemGetAddressRange(&base, &size, static_cast<CUdeviceptr>(BigIntU64(info[1]))),
        "cuMemGetAddressRange");
  auto o = Napi::Object::New(env);
  o.Set("base", Big(env, base));
  o.Set("size", Napi::Number::New(env, static_cast<double>(size)));
  return o;
}

// ipcGetMemHandle(device, base) -> Buffer(64)
Napi::Value IpcGetMemHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]));
  CUipcMemHandle h;
  std::memset(&h, 0, sizeof h);
  Check(env, d, d.cuIpcGetMemHandle(&h, static_cast<CUdeviceptr>(BigIntU64(info[1]))), "cuIpcGetMemHandle");
  return Napi::Buffer<char>::Copy(env, h.reserved, sizeof h.reserved);
}

// ipcOpenMemHandle(device, handle, flags) -> BigInt base of the mapping in this process.
Napi::Value IpcOpenMemHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]));
  auto h = HandleBytes<CUipcMemHandle>(env, info[1], "an IPC memory handle");
  CUdeviceptr base = 0;
  Check(env, d, d.cuIpcOpenMemHandle(&base, h, info[2].As<Napi::Number>().Uint32Value()), "cuIpcOpenMemHandle");
  return Big(env, base);
}

// ipcCloseMemHandle(device, base)
Napi::Value IpcCloseMemHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]));
  Check(env, d, d.cuIpcCloseMemHandle(static_cast<CUdeviceptr>(BigIntU64(info[1]))), "cuIpcCloseMemHandle");
  return env.Undefined();
}

// eventCreate(device, flags) -> BigInt event
Napi::Value EventCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]));
  CUevent ev = nullptr;
  Check(env, d, d.cuEventCreate(&ev, info[1].As<Napi::Number>().Uint32Value()), "cuEventCreate");
  return BigOf(env, ev);
}

// eventDestroy(device, event)
Napi::Value EventDestroy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]));
  Check(env, d, d.cuEventDestroy(Handle<CUevent_st>(info[1])), "cuEventDestroy");
  return env.Undefined();
}

// eventRecord(device, event, stream)
Napi::Value EventRecord(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]));
  Check(env, d, d.cuEventRecord(Handle<CUevent_st>(info[1]), Handle<CUstream_st>(info[2])), "cuEventRecord");
  return env.Undefined();
}

// eventQuery(device, event) -> true once the work before its record completed, false while NOT_READY.
Napi::Value EventQuery(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]));
  CUresult rc = d.cuEventQuery(Handle<CUevent_st>(info[1]));
  if (rc == CUDA_ERROR_NOT_READY) return Napi::Boolean::New(env, false);
  Check(env, d, rc, "cuEventQuery");
  return Napi::Boolean::New(env, true);
}

// eventSynchronize(device, event): blocks the calling (JS) thread until the event completed.
Napi::Value EventSynchronize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]));
  Check(env, d, d.cuEventSynchronize(Handle<CUevent_st>(info[1])), "cuEventSynchronize");
  return env.Undefined();
}

// ipcGetEventHandle(device, event) -> Buffer(64); the event must be INTERPROCESS | DISABLE_TIMING.
Napi::Value IpcGetEventHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]));
  CUipcEventHandle h;
  std::memset(&h, 0, sizeof h);
  Check(env, d, d.cuIpcGetEventHandle(&h, Handle<CUevent_st>(info[1])), "cuIpcGetEventHandle");
  return Napi::Buffer<char>::Copy(env, h.reserved, sizeof h.reserved);
}

// ipcOpenEventHandle(device, handle) -> BigInt event of this process naming the peer's event.
Napi::Value IpcOpenEventHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]));
  auto h = HandleBytes<CUipcEventHandle>(env, info[1], "an IPC event handle");
  CUevent ev = nullptr;
  Check(env, d, d.cuIpcOpenEventHandle(&ev, h), "cuIpcOpenEventHandle");
  return BigOf(env, ev);
}

// streamWaitEvent(device, stream, event): work queued on stream from now on waits for the event.
Napi::Value StreamWaitEvent(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]));
  Check(env, d, d.cuStreamWaitEvent(Handle<CUstream_st>(info[1]), Handle<CUevent_st>(info[2]), 0), "cuStreamWaitEvent");
  return env.Undefined();
}

// cuEventSynchronize on a pool thread: resolves once the event completed, rejects with ECUDA.
class EventWaitWorker : public Napi::AsyncWorker {
 public:
  EventWaitWorker(Napi::Env env, const CudaDriver& d, CUcontext ctx, CUevent ev)
      : Napi::AsyncWorker(env, "tprpc.cuda.eventWait"), deferred_(Napi::Promise::Deferred::New(env)), d_(d), ctx_(ctx), ev_(ev) {}
  Napi::Promise Promise() { return deferred_.Promise(); }
  // Pool thread: the context is per thread, so made current here too.
  void Execute() override {
    rc_ = d_.cuCtxSetCurrent(ctx_);
    call_ = "cuCtxSetCurrent";
    if (rc_ == CUDA_SUCCESS) {
      rc_ = d_.cuEventSynchronize(ev_);
      call_ = "cuEventSynchronize";
    }
  }
  // JS thread.
  void OnOK() override {
    if (rc_ == CUDA_SUCCESS) deferred_.Resolve(Env().Undefined());
    else deferred_.Reject(NativeResultError(Env(), "ECUDA", rc_, std::string(call_) + " failed: " + CuErrorText(d_, rc_)).Value());
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  const CudaDriver& d_;
  CUcontext ctx_;
  CUevent ev_;
  CUresult rc_ = CUDA_SUCCESS;
  const char* call_ = "";
};

// eventWait(device, event) -> Promise<void>: the wait runs off the JS thread (a libuv pool thread),
// so a completion is seen as soon as it happens, without polling.
Napi::Value EventWait(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CUcontext ctx = nullptr;
  const CudaDriver& d = MakeCurrent(env, Dev(info[0]), &ctx);
  auto* w = new EventWaitWorker(env, d, ctx, Handle<CUevent_st>(info[1]));
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

}  // namespace

void AddCudaIpc(Napi::Env env, Napi::Object ns) {
  const std::pair<const char*, Napi::Function::Callback> fns[] = {
      {"ipcAddressRange", IpcAddressRange},     {"ipcGetMemHandle", IpcGetMemHandle},
      {"ipcOpenMemHandle", IpcOpenMemHandle},   {"ipcCloseMemHandle", IpcCloseMemHandle},
      {"eventCreate", EventCreate},             {"eventDestroy", EventDestroy},
      {"eventRecord", EventRecord},             {"eventQuery", EventQuery},
      {"eventSynchronize", EventSynchronize},   {"ipcGetEventHandle", IpcGetEventHandle},
      {"ipcOpenEventHandle", IpcOpenEventHandle}, {"streamWaitEvent", StreamWaitEvent},
      {"eventWait", EventWait},
  };
  for (auto& [name, fn] : fns) ns.Set(name, Napi::Function::New(env, fn, name));
}

}  // namespace gpu
}  // namespace tprpc
