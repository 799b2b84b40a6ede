// The nccl channel's calls (sdk/channel/nccl/driver.ts, NcclDriver), added to the gpu() namespace:
// a communicator per pipe (ncclCommInitRank, off the JS thread), point-to-point ncclSend/ncclRecv
// of bytes on a stream, groups, asynchronous errors, abort and destroy. libnccl.so.2 is reached
// only through dynlib's table (gpu_api.h's Nccl row); without it every call throws NativeError
// "ENOTVIABLE" with dynlib's reason. A failed call throws (or rejects with) NativeError "ENCCL"
// whose errno is the ncclResult_t and whose message carries ncclGetErrorString's text.
//
// NB: NCCL needs one GPU per rank. The machines lent to this project have one GPU, so a two-rank
// communicator cannot be built there, and no GPU has run this file; tests use a stand-in libnccl
// compiled by test/native/nccl_standin.ts.
//
// Thread: JS thread, except ncclCommInitRank, which blocks until every rank joined and so runs on
// a libuv pool thread (InitWorker::Execute) with the device's primary context made current there.
#include <cstring>
#include <string>

#include "errors.h"
#include "napi_bigint.h"
#include "gpu/caching_allocator.h"
#include "gpu/cuda_memory.h"

namespace tprpc {
namespace gpu {
namespace {

ncclComm_t Comm(const Napi::Value& v) { return reinterpret_cast<ncclComm_t>(static_cast<uintptr_t>(BigIntU64(v))); }
CUstream Stream(const Napi::Value& v) { return reinterpret_cast<CUstream>(static_cast<uintptr_t>(BigIntU64(v))); }

const Nccl& Api(Napi::Env env) {
  const Nccl* n = NcclApi();
  if (n == nullptr) {
    const LibStatus& s = Probe(Lib::Nccl);
    ThrowNative(env, "ENOTVIABLE", 0, "nccl is not viable here: " + (s.reason.empty() ? "unknown reason" : s.reason));
  }
  return *n;
}

std::string Text(const Nccl& n, const char* call, ncclResult_t rc) {
  const char* why = n.ncclGetErrorString(rc);
  return std::string(call) + " failed: " + (why ? why : "unknown NCCL error") + " (ncclResult " + std::to_string(rc) +
         ")";
}

void Check(Napi::Env env, const Nccl& n, ncclResult_t rc, const char* call) {
  if (rc != 0) throw NativeResultError(env, "ENCCL", rc, Text(n, call, rc));
}

// ncclCommInitRank on a pool thread; resolves with the communicator, rejects with ENCCL / ECUDA.
class InitWorker : public Napi::AsyncWorker {
 public:
  InitWorker(Napi::Env env, const Nccl& n, const CudaDriver& d, CUcontext ctx, int nranks, const ncclUniqueId& id,
             int rank)
      : Napi::AsyncWorker(env, "tprpc.nccl.init"),
        deferred_(Napi::Promise::Deferred::New(env)),
        n_(n),
        d_(d),
        ctx_(ctx),
        nranks_(nranks),
        id_(id),
        rank_(rank) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

  // Pool thread.
  void Execute() override {
    // NB: NCCL takes the device from the calling thread's current context.
    cu_ = d_.cuCtxSetCurrent(ctx_);
    if (cu_ == CUDA_SUCCESS) rc_ = n_.ncclCommInitRank(&comm_, nranks_, id_, rank_);
  }
  // JS thread.
  void OnOK() override {
    Napi::Env env = Env();
    if (cu_ != CUDA_SUCCESS)
      deferred_.Reject(NativeResultError(env, "ECUDA", cu_, "cuCtxSetCurrent failed: " + CuErrorText(d_, cu_)).Value());
    else if (rc_ != 0)
      deferred_.Reject(NativeResultError(env, "ENCCL", rc_, Text(n_, "ncclCommInitRank", rc_)).Value());
    else
      deferred_.Resolve(Napi::BigInt::New(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(comm_))));
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  const Nccl& n_;
  const CudaDriver& d_;
  CUcontext ctx_;
  int nranks_;
  ncclUniqueId id_;
  int rank_;
  CUresult cu_ = CUDA_SUCCESS;
  ncclResult_t rc_ = 0;
  ncclComm_t comm_ = nullptr;
};

// ncclCommInitRank(device, nranks, id: Uint8Array(128), rank) -> Promise<BigInt comm>
Napi::Value CommInitRank(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Nccl& n = Api(env);
  CUcontext ctx = nullptr;
  const CudaDriver& d = MakeCurrent(env, info[0].As<Napi::Number>().Int32Value(), &ctx);
  ncclUniqueId id;
  if (!info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().ByteLength() != sizeof id.internal)
    ThrowNative(env, "EINVAL", 0, "an ncclUniqueId is a Uint8Array of " + std::to_string(sizeof id.internal) + " bytes");
  auto view = info[2].As<Napi::TypedArray>();
  std::memcpy(id.internal, static_cast<uint8_t*>(view.ArrayBuffer().Data()) + view.ByteOffset(), sizeof id.internal);
  auto* w = new InitWorker(env, n, d, ctx, info[1].As<Napi::Number>().Int32Value(), id,
                           info[3].As<Napi::Number>().Int32Value());
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

// ncclCommDestroy(comm) / ncclCommAbort(comm)
Napi::Value CommDestroy(const Napi::CallbackInfo& info) {
  const Nccl& n = Api(info.Env());
  Check(info.Env(), n, n.ncclCommDestroy(Comm(info[0])), "ncclCommDestroy");
  return info.Env().Undefined();
}
Napi::Value CommAbort(const Napi::CallbackInfo& info) {
  const Nccl& n = Api(info.Env());
  Check(info.Env(), n, n.ncclCommAbort(Comm(info[0])), "ncclCommAbort");
  return info.Env().Undefined();
}

// ncclCommGetAsyncError(comm) -> ncclResult_t of the communicator's asynchronous work (0: none yet).
Napi::Value CommGetAsyncError(const Napi::CallbackInfo& info) {
  const Nccl& n = Api(info.Env());
  ncclResult_t async = 0;
  Check(info.Env(), n, n.ncclCommGetAsyncError(Comm(info[0]), &async), "ncclCommGetAsyncError");
  return Napi::Number::New(info.Env(), async);
}

// ncclSend(device, comm, ptr, bytes, peer, stream) / ncclRecv(...): bytes as ncclUint8, queued on stream.
Napi::Value SendOrRecv(const Napi::CallbackInfo& info, bool send) {
  Napi::Env env = info.Env();
  const Nccl& n = Api(env);
  MakeCurrent(env, info[0].As<Napi::Number>().Int32Value());
  auto* ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(BigIntU64(info[2])));
  auto bytes = static_cast<size_t>(info[3].As<Napi::Number>().Int64Value());
  int peer = info[4].As<Napi::Number>().Int32Value();
  if (send) Check(env, n, n.ncclSend(ptr, bytes, ncclUint8, peer, Comm(info[1]), Stream(info[5])), "ncclSend");
  else Check(env, n, n.ncclRecv(ptr, bytes, ncclUint8, peer, Comm(info[1]), Stream(info[5])), "ncclRecv");
  return env.Undefined();
}
Napi::Value Send(const Napi::CallbackInfo& info) { return SendOrRecv(info, true); }
Napi::Value Recv(const Napi::CallbackInfo& info) { return SendOrRecv(info, false); }

// ncclGroupStart() / ncclGroupEnd(): the calls between them are issued together.
Napi::Value GroupStart(const Napi::CallbackInfo& info) {
  const Nccl& n = Api(info.Env());
  Check(info.Env(), n, n.ncclGroupStart(), "ncclGroupStart");
  return info.Env().Undefined();
}
Napi::Value GroupEnd(const Napi::CallbackInfo& info) {
  const Nccl& n = Api(info.Env());
  Check(info.Env(), n, n.ncclGroupEnd(), "ncclGroupEnd");
  return info.Env().Undefined();
}

// ncclErrorString(result) -> ncclGetErrorString's text.
Napi::Value ErrorString(const Napi::CallbackInfo& info) {
  const Nccl& n = Api(info.Env());
  const char* s = n.ncclGetErrorString(info[0].As<Napi::Number>().Int32Value());
  return Napi::String::New(info.Env(), s ? s : "unknown NCCL error");
}

}  // namespace

void AddNccl(Napi::Env env, Napi::Object ns) {
  const std::pair<const char*, Napi::Function::Callback> fns[] = {
      {"ncclCommInitRank", CommInitRank}, {"ncclCommDestroy", CommDestroy},
      {"ncclCommAbort", CommAbort},       {"ncclCommGetAsyncError", CommGetAsyncError},
      {"ncclSend", Send},                 {"ncclRecv", Recv},
      {"ncclGroupStart", GroupStart},     {"ncclGroupEnd", GroupEnd},
      {"ncclErrorString", ErrorString},
  };
  for (auto& [name, fn] : fns) ns.Set(name, Napi::Function::New(env, fn, name));
}

}  // namespace gpu
}  // namespace tprpc
