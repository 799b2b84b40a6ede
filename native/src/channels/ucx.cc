// The ucx channel's data path: UCX's UCP tag API (libucp, loaded with dlopen by
// dynlib.cc), so one code path covers shared memory, TCP, InfiniBand/RoCE and,
// with a CUDA-enabled UCX, GPU memory. UCX picks its transports from the
// UCX_* environment (UCX_TLS, UCX_NET_DEVICES, ...); TPRPC_UCX_TLS overrides
// UCX_TLS for tprpc only. On InfiniBand hosts the default (UCX_TLS unset)
// selects rc/ud/dc verbs transports on the active HCA ports; UCX_NET_DEVICES=mlx5_0:1
// pins one port. GPU memory needs a UCX built with cuda (cuda_copy, cuda_ipc, gdr_copy).
//
// Protocol (the TS side, sdk/channel/ucx, runs steps 1-2 over the control connection):
//  1. Each side creates a context and a worker (ucxCreate, on a libuv thread)
//     and sends its worker address to the peer.
//  2. Each side connects an endpoint to the peer's address (connect), with
//     peer error handling: a dead peer fails the endpoint's requests.
//  3. Transfers are tagged messages: send(id, bytes) is ucp_tag_send_nbx with
//     tag = id; recv(id, dest) is ucp_tag_recv_nbx matching exactly that tag, so
//     recvs may be posted in any order and before or after the data arrives.
//  4. close() force-closes the endpoint, cancels posted recvs and destroys
//     the worker and the context.
//
// Threads: the worker is single-threaded and touched only by the channel's
// progress thread, which submits the calls JS queued, progresses the worker and
// sleeps on the worker's event fd (armed) plus an eventfd for new calls.
// ucxCreate's setup runs on a libuv worker thread; promises settle on the JS thread.
#include <errno.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "channels/common.h"
#include "dynlib.h"

namespace tprpc {
namespace channels {
namespace {

// --- The slice of the UCP ABI tprpc uses (UCX >= 1.10; layouts as in ucp.h / ucp_def.h). ---
// NB: UCP structs are extended at their end and read only where field_mask says so, so each
// struct below declares the fields up to the last one we set and pads the rest with zeros.
using ucs_status_t = int;
using ucp_tag_t = uint64_t;
constexpr ucs_status_t UCS_OK = 0, UCS_INPROGRESS = 1, UCS_ERR_BUSY = -15, UCS_ERR_CANCELED = -16,
                       UCS_ERR_MESSAGE_TRUNCATED = -9, UCS_ERR_LAST = -100;
constexpr uint64_t UCP_PARAM_FIELD_FEATURES = 1ull << 0, UCP_FEATURE_TAG = 1ull << 0, UCP_FEATURE_WAKEUP = 1ull << 4;
constexpr uint64_t UCP_WORKER_PARAM_FIELD_THREAD_MODE = 1ull << 0;
constexpr uint64_t UCP_EP_PARAM_FIELD_REMOTE_ADDRESS = 1ull << 0, UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE = 1ull << 1,
                   UCP_EP_PARAM_FIELD_ERR_HANDLER = 1ull << 2;
constexpr int UCP_ERR_HANDLING_MODE_PEER = 1;
constexpr uint32_t UCP_OP_ATTR_FIELD_CALLBACK = 1u << 1, UCP_OP_ATTR_FIELD_USER_DATA = 1u << 2,
                   UCP_OP_ATTR_FIELD_FLAGS = 1u << 4, UCP_OP_ATTR_FLAG_NO_IMM_CMPL = 1u << 16;
constexpr uint32_t UCP_EP_CLOSE_FLAG_FORCE = 1u << 0;

struct ucp_params_t {
  uint64_t field_mask;
  uint64_t features;
  char rest[256];
};
struct ucp_worker_params_t {
  uint64_t field_mask;
  int thread_mode;  // UCS_THREAD_MODE_SINGLE = 0
  char rest[512];
};
using ucp_err_cb = void (*)(void* arg, void* ep, ucs_status_t status);
struct ucp_ep_params_t {
  uint64_t field_mask;
  const void* address;
  int err_mode;
  ucp_err_cb err_cb;
  void* err_arg;
  char rest[256];
};
struct ucp_tag_recv_info_t {
  ucp_tag_t sender_tag;
  size_t length;
};
using send_cb = void (*)(void* request, ucs_status_t status, void* user_data);
using recv_cb = void (*)(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data);
struct ucp_request_param_t {
  uint32_t op_attr_mask;
  uint32_t flags;
  void* request;
  union {
    send_cb send;
    recv_cb recv;
  } cb;
  uint64_t datatype;
  void* user_data;
  void* reply_buffer;
  int memory_type;
  union {
    size_t* length;
    ucp_tag_recv_info_t* tag_info;
  } recv_info;
  void* memh;
};

// Statuses by which a request tells that its peer went away (before or without the error handler).
bool PeerLost(ucs_status_t st) {
  return st == -25 /* CONNECTION_RESET */ || st == -80 /* ENDPOINT_TIMEOUT */ || st == -6 /* UNREACHABLE */ ||
         st == -3 /* IO_ERROR */;
}

bool IsErr(void* p) { return reinterpret_cast<uintptr_t>(p) >= static_cast<uintptr_t>(static_cast<intptr_t>(UCS_ERR_LAST)); }
ucs_status_t PtrStatus(void* p) { return static_cast<ucs_status_t>(reinterpret_cast<intptr_t>(p)); }

struct Ucp {
  void (*get_version)(unsigned*, unsigned*, unsigned*);
  ucs_status_t (*config_read)(const char*, const char*, void**);
  ucs_status_t (*config_modify)(void*, const char*, const char*);
  void (*config_release)(void*);
  ucs_status_t (*init_version)(unsigned, unsigned, const ucp_params_t*, const void*, void**);
  void (*cleanup)(void*);
  ucs_status_t (*worker_create)(void*, const ucp_worker_params_t*, void**);
  void (*worker_destroy)(void*);
  ucs_status_t (*worker_get_address)(void*, void**, size_t*);
  void (*worker_release_address)(void*, void*);
  unsigned (*worker_progress)(void*);
  ucs_status_t (*worker_get_efd)(void*, int*);
  ucs_status_t (*worker_arm)(void*);
  ucs_status_t (*ep_create)(void*, const ucp_ep_params_t*, void**);
  void* (*ep_close_nbx)(void*, const ucp_request_param_t*);
  void* (*tag_send_nbx)(void*, const void*, size_t, ucp_tag_t, const ucp_request_param_t*);
  void* (*tag_recv_nbx)(void*, void*, size_t, ucp_tag_t, ucp_tag_t, const ucp_request_param_t*);
  ucs_status_t (*request_check_status)(void*);
  void (*request_cancel)(void*, void*);
  void (*request_free)(void*);
  const char* (*status_string)(ucs_status_t);
};

// The UCP functions, or null (and *why) when libucp is not viable.
const Ucp* LoadUcp(std::string* why) {
  static Ucp ucp;
  static bool ok = [] {
    if (!Probe(Lib::Ucx).viable) return false;
    auto f = [](const char* n) { return Symbol(Lib::Ucx, n); };
#define TPRPC_UCP(field, name) ucp.field = reinterpret_cast<decltype(ucp.field)>(f(name))
    TPRPC_UCP(get_version, "ucp_get_version");
    TPRPC_UCP(config_read, "ucp_config_read");
    TPRPC_UCP(config_modify, "ucp_config_modify");
    TPRPC_UCP(config_release, "ucp_config_release");
    TPRPC_UCP(init_version, "ucp_init_version");
    TPRPC_UCP(cleanup, "ucp_cleanup");
    TPRPC_UCP(worker_create, "ucp_worker_create");
    TPRPC_UCP(worker_destroy, "ucp_worker_destroy");
    TPRPC_UCP(worker_get_address, "ucp_worker_get_address");
    TPRPC_UCP(worker_release_address, "ucp_worker_release_address");
    TPRPC_UCP(worker_progress, "ucp_worker_progress");
    TPRPC_UCP(worker_get_efd, "ucp_worker_get_efd");
    TPRPC_UCP(worker_arm, "ucp_worker_arm");
    TPRPC_UCP(ep_create, "ucp_ep_create");
    TPRPC_UCP(ep_close_nbx, "ucp_ep_close_nbx");
    TPRPC_UCP(tag_send_nbx, "ucp_tag_send_nbx");
    TPRPC_UCP(tag_recv_nbx, "ucp_tag_recv_nbx");
    TPRPC_UCP(request_check_status, "ucp_request_check_status");
    TPRPC_UCP(request_cancel, "ucp_request_cancel");
    TPRPC_UCP(request_free, "ucp_request_free");
    TPRPC_UCP(status_string, "ucs_status_string");
#undef TPRPC_UCP
    void* const* p = reinterpret_cast<void* const*>(&ucp);
    for (size_t i = 0; i < sizeof ucp / sizeof(void*); ++i)
      if (p[i] == nullptr) return false;
    return true;
  }();
  if (!ok) {
    const LibStatus& s = Probe(Lib::Ucx);
    *why = s.viable ? "libucp lacks a symbol the ucx channel needs (UCX older than 1.10?)"
                    : "ucx channel: " + s.reason;
    return nullptr;
  }
  return &ucp;
}

Outcome UcsFail(const Ucp* ucp, const char* code, ucs_status_t st, const std::string& what) {
  return Outcome::Fail(code, 0, "ucx channel: " + what + ": " + ucp->status_string(st) + " (" + std::to_string(st) + ")");
}

// --- One channel: a context, a worker, one endpoint to the peer, a progress thread. ---

enum class OpKind { Connect, Send, Recv };

struct Op {
  OpKind kind = OpKind::Send;
  uint64_t id = 0;
  char* data = nullptr;
  uint64_t length = 0;
  std::string address;  // Connect
  Completer::Job* job = nullptr;
};

class UcxCore;

// A request in flight (user_data of its callback).
struct Inflight {
  UcxCore* core;
  Op op;
  void* request = nullptr;
  ucp_tag_recv_info_t info{};
  bool submitting = false;  // the callback may run inside the submitting call
  bool fired = false;
  ucs_status_t status = UCS_OK;
};

class UcxCore {
 public:
  UcxCore(const Ucp* ucp, void* context, void* worker, std::string address, bool peer_errors, Completer* done)
      : ucp_(ucp), context_(context), worker_(worker), address_(std::move(address)), done_(done), peer_errors_(peer_errors) {}

  // JS thread.
  void Start() {
    wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    thread_ = std::thread([this] { Loop(); });
  }

  bool Post(Op op, Outcome* why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_.load()) return *why = Outcome::Fail("ECHANNELCLOSED", 0, "ucx channel: closed"), false;
    if (!broken_.ok) return *why = broken_, false;
    ops_.push_back(std::move(op));
    Wake();
    return true;
  }

  // JS thread, idempotent.
  void Close(Napi::Env env) {
    if (closed_) return;
    closed_ = true;
    closing_.store(true);
    Wake();
    thread_.join();
    Outcome closed = Outcome::Fail("ECHANNELCLOSED", 0, "ucx channel: closed before the transfer finished");
    for (auto& op : ops_) done_->Settle(env, op.job, closed);
    ops_.clear();
    done_->Release();
    close(wake_fd_);
  }

  const std::string& address() const { return address_; }
  Completer* completer() const { return done_; }

 private:
  void Wake() {
    uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof one) < 0) {
      // NB: only fails when the counter is saturated, and then the thread is awake anyway.
    }
  }

  Outcome Broken() {
    std::lock_guard<std::mutex> lock(mu_);
    return broken_;
  }

  static void OnPeerError(void* arg, void*, ucs_status_t st) {
    auto* self = static_cast<UcxCore*>(arg);
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      if (self->broken_.ok)
        self->broken_ = Outcome::Fail("ECONNRESET", ECONNRESET,
                                      std::string("ucx channel: the peer is gone (exited or unreachable): ") +
                                          self->ucp_->status_string(st));
    }
    // Posted recvs never complete once the sender is gone: cancel them (their callbacks report broken_).
    std::vector<Inflight*> recvs;  // NB: a copy: cancelling may run the callback, which erases from inflight_
    for (Inflight* f : self->inflight_)
      if (f->op.kind == OpKind::Recv) recvs.push_back(f);
    for (Inflight* f : recvs) self->ucp_->request_cancel(self->worker_, f->request);
  }

  void Complete(Inflight* f, ucs_status_t st) {
    Outcome o;
    if (st == UCS_OK && f->op.kind == OpKind::Recv && f->info.length != f->op.length)
      o = Outcome::Fail("EPROTO", 0,
                        "ucx channel: transfer " + std::to_string(f->op.id) + " carries " +
                            std::to_string(f->info.length) + " bytes but recv() posted a buffer of " +
                            std::to_string(f->op.length));
    else if (st == UCS_ERR_MESSAGE_TRUNCATED)
      o = Outcome::Fail("EPROTO", 0,
                        "ucx channel: transfer " + std::to_string(f->op.id) + " is larger than the recv() buffer of " +
                            std::to_string(f->op.length) + " bytes");
    else if (st != UCS_OK) {
      Outcome b = Broken();
      if (closing_.load())
        o = Outcome::Fail("ECHANNELCLOSED", 0, "ucx channel: closed before the transfer finished");
      else if (!b.ok)
        o = b;
      else if (PeerLost(st))
        o = UcsFail(ucp_, "ECONNRESET", st, "the peer is gone (exited or unreachable)");
      else
        o = UcsFail(ucp_, "EUCX", st, f->op.kind == OpKind::Send ? "send failed" : "recv failed");
    }
    done_->Finish(f->op.job, o);
  }

  static void Fired(Inflight* f, void* request, ucs_status_t st) {
    f->core->ucp_->request_free(request);
    if (f->submitting) {  // Submit() finishes it
      f->fired = true;
      f->status = st;
      return;
    }
    f->core->inflight_.erase(f);
    f->core->Complete(f, st);
    delete f;
  }

  static void OnSend(void* request, ucs_status_t st, void* user) { Fired(static_cast<Inflight*>(user), request, st); }

  static void OnRecv(void* request, ucs_status_t st, const ucp_tag_recv_info_t* info, void* user) {
    auto* f = static_cast<Inflight*>(user);
    if (info != nullptr) f->info = *info;
    Fired(f, request, st);
  }

  // Progress thread: starts one queued call.
  void Submit(Op op) {
    if (op.kind == OpKind::Connect) {
      ucp_ep_params_t p = {};
      p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
      if (peer_errors_) p.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
      p.address = op.address.data();
      p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      p.err_cb = &UcxCore::OnPeerError;
      p.err_arg = this;
      Outcome o;
      if (ep_ != nullptr)
        o = Outcome::Fail("EINVAL", 0, "ucx channel: connect() was already called");
      else {
        ucs_status_t st = ucp_->ep_create(worker_, &p, &ep_);
        if (st != UCS_OK && peer_errors_) {
          // NB: UCX 1.13's shared-memory transports (posix, sysv) cannot report a dead peer, and
          // refuse peer error handling; then connect without it: the pipe's close covers peer death.
          p.field_mask &= ~(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER);
          st = ucp_->ep_create(worker_, &p, &ep_);
          peer_errors_ = false;
        }
        if (st != UCS_OK) {
          ep_ = nullptr;
          o = UcsFail(ucp_, "ECONNREFUSED", st, "could not create an endpoint to the peer's worker");
        }
      }
      done_->Finish(op.job, o);
      return;
    }
    if (op.kind == OpKind::Send && ep_ == nullptr) {
      done_->Finish(op.job, Outcome::Fail("ENOTCONN", 0, "ucx channel: send() before connect()"));
      return;
    }
    auto* f = new Inflight{this, std::move(op)};
    f->submitting = true;
    ucp_request_param_t rp = {};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    rp.user_data = f;
    void* req;
    if (f->op.kind == OpKind::Send) {
      rp.cb.send = &UcxCore::OnSend;
      req = ucp_->tag_send_nbx(ep_, f->op.data, f->op.length, f->op.id, &rp);
    } else {
      // NB: UCX 1.13 does not fill recv_info on immediate completion, so ask for the callback always.
      rp.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      rp.cb.recv = &UcxCore::OnRecv;
      req = ucp_->tag_recv_nbx(worker_, f->op.data, f->op.length, f->op.id, ~ucp_tag_t{0}, &rp);
    }
    f->submitting = false;
    if (f->fired) {
      Complete(f, f->status);
      delete f;
    } else if (req == nullptr) {  // a send completed in place
      Complete(f, UCS_OK);
      delete f;
    } else if (IsErr(req)) {
      Complete(f, PtrStatus(req));
      delete f;
    } else {
      f->request = req;
      inflight_.insert(f);
    }
  }

  // Progress thread: step 4 of the story.
  void Shutdown() {
    if (ep_ != nullptr) {
      ucp_request_param_t rp = {};
      rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
      void* req = ucp_->ep_close_nbx(ep_, &rp);
      if (req != nullptr && !IsErr(req)) {
        while (ucp_->request_check_status(req) == UCS_INPROGRESS) ucp_->worker_progress(worker_);
        ucp_->request_free(req);
      }
      ep_ = nullptr;
    }
    std::vector<Inflight*> left(inflight_.begin(), inflight_.end());
    for (Inflight* f : left) ucp_->request_cancel(worker_, f->request);
    for (int i = 0; i < 1000 && !inflight_.empty(); ++i) ucp_->worker_progress(worker_);
    // NB: whatever UCX did not complete is failed here; UCX frees its requests with the worker.
    for (Inflight* f : inflight_) {
      done_->Finish(f->op.job, Outcome::Fail("ECHANNELCLOSED", 0, "ucx channel: closed before the transfer finished"));
      delete f;
    }
    inflight_.clear();
    ucp_->worker_destroy(worker_);
    ucp_->cleanup(context_);
  }

  void Loop() {
    int efd = -1;
    ucp_->worker_get_efd(worker_, &efd);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {};
    ev.events = EPOLLIN;
    ev.data.fd = efd;
    epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev);
    ev.data.fd = wake_fd_;
    epoll_ctl(ep, EPOLL_CTL_ADD, wake_fd_, &ev);
    for (;;) {
      std::deque<Op> ops;
      {
        std::lock_guard<std::mutex> lock(mu_);
        ops.swap(ops_);
      }
      if (closing_.load()) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          for (auto& op : ops) ops_.push_back(std::move(op));  // Close() settles them on the JS thread
        }
        Shutdown();
        close(ep);
        return;
      }
      for (auto& op : ops) {
        Outcome b = Broken();
        if (!b.ok)
          done_->Finish(op.job, b);
        else
          Submit(std::move(op));
      }
      while (ucp_->worker_progress(worker_) != 0) {
      }
      if (ucp_->worker_arm(worker_) == UCS_ERR_BUSY) continue;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!ops_.empty() || closing_.load()) continue;
      }
      struct epoll_event got[2];
      int n = epoll_wait(ep, got, 2, 100);
      for (int i = 0; i < n; ++i)
        if (got[i].data.fd == wake_fd_) {
          uint64_t v;
          if (read(wake_fd_, &v, sizeof v) < 0) {
            // NB: EAGAIN when another wake already drained it.
          }
        }
    }
  }

  const Ucp* ucp_;
  void* context_;
  void* worker_;
  void* ep_ = nullptr;
  std::string address_;
  Completer* done_;
  bool peer_errors_;  // ask UCX to report a dead peer (shm-only transports refuse it)
  int wake_fd_ = -1;
  std::thread thread_;
  std::mutex mu_;
  std::deque<Op> ops_;
  Outcome broken_;                        // guarded by mu_
  std::unordered_set<Inflight*> inflight_;  // progress thread only
  std::atomic<bool> closing_{false};
  bool closed_ = false;     // JS thread
};

// --- JS objects. ---

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
    wp.thread_mode = 0;  // single: only the progress thread touches the worker
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

void RegisterUcx(Napi::Env env, Napi::Object ns) {
  UcxChannel::Define(env);
  ns.Set("ucxInfo", Napi::Function::New(env, UcxInfo));
  ns.Set("ucxCreate", Napi::Function::New(env, UcxCreate));
}

}  // namespace channels
}  // namespace tprpc
