// The ucx channel's JS face: the UcxChannel class (a wrapper over UcxCore, core.h), ucxCreate()
// (context and worker set up on a libuv worker thread, honouring TPRPC_UCX_TLS) and ucxInfo(),
// registered by RegisterUcx (channels/register.cc). Types: sdk/native/channels.ts.
//
// Threads: everything here runs on the JS thread, except CreateWorker::Execute (a libuv worker
// thread).
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "channels/common.h"
#include "channels/ucx/core.h"
#include "channels/ucx_api.h"

namespace tprpc {
namespace channels {
namespace ucx {
namespace {

thread_local Napi::FunctionReference* g_ucx_ctor = nullptr;

// JS: UcxChannel { address: Uint8Array, connect(peerAddress): Promise, send(id, bytes): Promise,
//                  recv(id, dest): Promise, close(), closed }
class UcxChannel : public Napi::ObjectWrap<UcxChannel> {
 public:
  static void Define(Napi::Env env) {
    Napi::Function f = DefineClass(env, "UcxChannel",
                                   {InstanceMethod<&UcxChannel::Connect>("connect"),
                                    InstanceMethod<&UcxChannel::Send>("send"), InstanceMethod<&UcxChannel::Recv>("recv"),
                                    InstanceMethod<&UcxChannel::Close>("close"),
                                    InstanceAccessor<&UcxChannel::Address>("address"),
                                    InstanceAccessor<&UcxChannel::Closed>("closed")});
    g_ucx_ctor = new Napi::FunctionReference(Napi::Persistent(f));
  }

  static Napi::Object Wrap(Napi::Env env, std::shared_ptr<UcxCore> core) {
    Napi::Object o = g_ucx_ctor->New({});
    UcxChannel* self = Unwrap(o);
    self->core_ = std::move(core);
    self->core_->Start();
    self->Ref();  // NB: open channels live until close() (their thread uses them)
    return o;
  }

  explicit UcxChannel(const Napi::CallbackInfo& info) : Napi::ObjectWrap<UcxChannel>(info) {}

 private:
  Napi::Value Queue(const Napi::CallbackInfo& info, Op op, Napi::Value keep) {
    Napi::Env env = info.Env();
    if (!core_) throw Napi::Error::New(env, "UcxChannel: not created by ucxCreate()");
    Napi::Value promise;
    op.job = core_->completer()->Begin(env, keep, &promise);
    Outcome why;
    if (closed_)
      core_->completer()->Settle(env, op.job, Outcome::Fail("ECHANNELCLOSED", 0, "ucx channel: closed"));
    else if (Completer::Job* job = op.job; !core_->Post(std::move(op), &why))
      core_->completer()->Settle(env, job, why);
    return promise;
  }

  Napi::Value Connect(const Napi::CallbackInfo& info) {
    Bytes b = BytesArg(info[0], "UcxChannel.connect");
    Op op;
    op.kind = OpKind::Connect;
    op.address.assign(b.data, b.length);
    return Queue(info, std::move(op), info.Env().Undefined());
  }

  Napi::Value Send(const Napi::CallbackInfo& info) {
    Op op;
    op.kind = OpKind::Send;
    op.id = static_cast<uint64_t>(NumberArg(info, 0, "UcxChannel.send", "id"));
    Bytes b = BytesArg(info[1], "UcxChannel.send");
    op.data = b.data;
    op.length = b.length;
    return Queue(info, std::move(op), info[1]);
  }

  Napi::Value Recv(const Napi::CallbackInfo& info) {
    Op op;
    op.kind = OpKind::Recv;
    op.id = static_cast<uint64_t>(NumberArg(info, 0, "UcxChannel.recv", "id"));
    Bytes b = BytesArg(info[1], "UcxChannel.recv");
    op.data = b.data;
    op.length = b.length;
    return Queue(info, std::move(op), info[1]);
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    if (core_ && !closed_) {
      closed_ = true;
      core_->Close(info.Env());
      Unref();
    }
    return info.Env().Undefined();
  }

  Napi::Value Address(const Napi::CallbackInfo& info) {
    const std::string& a = core_ ? core_->address() : std::string();
    return Napi::Buffer<char>::Copy(info.Env(), a.data(), a.size());
  }

  Napi::Value Closed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), closed_); }

  std::shared_ptr<UcxCore> core_;
  bool closed_ = false;
};

// True when a UCX_TLS list names only same-host transports, which cannot report a dead peer
// (UCX 1.13 refuses peer error handling over them, logging an error): then tprpc does not ask.
bool ShmOnly(std::string tls) {
  if (tls.empty()) {
    const char* env = std::getenv("UCX_TLS");
    tls = env != nullptr ? env : "";
  }
  if (tls.empty()) return false;
  static const char* kLocal[] = {"shm", "posix", "sysv", "cma", "knem", "xpmem", "self", "sm"};
  size_t at = 0;
  while (at <= tls.size()) {
    size_t end = tls.find(',', at);
    if (end == std::string::npos) end = tls.size();
    std::string t = tls.substr(at, end - at);
    if (!t.empty() && t[0] == '^') return false;  // an exclusion list leaves network transports in
    bool local = false;
    for (const char* l : kLocal) local = local || t == l;
    if (!t.empty() && !local) return false;
    at = end + 1;
  }
  return true;
}

// ucxCreate(): Promise<UcxChannel> — context and worker set up on a libuv thread.
class CreateWorker : public Napi::AsyncWorker {
 public:
  CreateWorker(Napi::Env env, const Ucp* ucp, std::string tls)
      : Napi::AsyncWorker(env, "tprpc.ucx.create"), deferred_(Napi::Promise::Deferred::New(env)), ucp_(ucp), tls_(std::move(tls)) {}

  Napi::Value Promise() { return deferred_.Promise(); }

  void Execute() override {
    void* config = nullptr;
    ucs_status_t st = ucp_->config_read(nullptr, nullptr, &config);
    if (st != UCS_OK) return Fail(st, "reading the UCX configuration (UCX_* variables) failed");
    if (!tls_.empty() && (st = ucp_->config_modify(config, "TLS", tls_.c_str())) != UCS_OK) {
      ucp_->config_release(config);
      return Fail(st, "TPRPC_UCX_TLS=" + tls_ + " was refused");
    }
    unsigned major = 0, minor = 0, release = 0;
    ucp_->get_version(&major, &minor, &release);
    ucp_params_t params = {};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    st = ucp_->init_version(1, minor < 13 ? minor : 13, &params, config, &context_);
    ucp_->config_release(config);
    if (st != UCS_OK) return Fail(st, "ucp_init failed (no usable transport for UCX_TLS?)");
    ucp_worker_params_t wp = {};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // only the progress thread touches the worker
    if ((st = ucp_->worker_create(context_, &wp, &worker_)) != UCS_OK) {
      ucp_->cleanup(context_);
      return Fail(st, "ucp_worker_create failed");
    }
    void* addr = nullptr;
    size_t len = 0;
    if ((st = ucp_->worker_get_address(worker_, &addr, &len)) != UCS_OK) {
      ucp_->worker_destroy(worker_);
      ucp_->cleanup(context_);
      return Fail(st, "ucp_worker_get_address failed");
    }
    address_.assign(static_cast<char*>(addr), len);
    ucp_->worker_release_address(worker_, addr);
  }

  void OnOK() override {
    Napi::Env env = Env();
    if (!outcome_.ok) return deferred_.Reject(ToJsError(env, outcome_).Value());
    auto core = std::make_shared<UcxCore>(ucp_, context_, worker_, address_, !ShmOnly(tls_), Completer::Create(env, "tprpc.ucx"));
    deferred_.Resolve(UcxChannel::Wrap(env, std::move(core)));
  }

  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  void Fail(ucs_status_t st, const std::string& what) { outcome_ = UcsFail(ucp_, "EUCX", st, what); }

  Napi::Promise::Deferred deferred_;
  const Ucp* ucp_;
  std::string tls_;
  void* context_ = nullptr;
  void* worker_ = nullptr;
  std::string address_;
  Outcome outcome_;
};

Napi::Value UcxCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string why;
  const Ucp* ucp = LoadUcp(&why);
  if (ucp == nullptr) throw ToJsError(env, Outcome::Fail("ENOTVIABLE", 0, why));
  std::string tls;
  if (info.Length() > 0 && info[0].IsString()) tls = info[0].As<Napi::String>().Utf8Value();
  auto* w = new CreateWorker(env, ucp, tls);
  Napi::Value p = w->Promise();
  w->Queue();
  return p;
}

// ucxInfo() -> { viable, reason?, version? }
Napi::Value UcxInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string why;
  const Ucp* ucp = LoadUcp(&why);
  auto o = Napi::Object::New(env);
  o.Set("viable", Napi::Boolean::New(env, ucp != nullptr));
  if (ucp == nullptr) {
    o.Set("reason", Napi::String::New(env, why));
  } else {
    unsigned a = 0, b = 0, c = 0;
    ucp->get_version(&a, &b, &c);
    o.Set("version", Napi::String::New(env, std::to_string(a) + "." + std::to_string(b) + "." + std::to_string(c)));
  }
  return o;
}

}  // namespace
}  // namespace ucx

void RegisterUcx(Napi::Env env, Napi::Object ns) {
  ucx::UcxChannel::Define(env);
  ns.Set("ucxInfo", Napi::Function::New(env, ucx::UcxInfo));
  ns.Set("ucxCreate", Napi::Function::New(env, ucx::UcxCreate));
}

}  // namespace channels
}  // namespace tprpc
