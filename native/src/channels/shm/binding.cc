// The shm channel's JS face: the ShmChannel class (a wrapper over ShmCore, core.h), the
// handshake's worker, and the addon functions shmListen(), shmConnect() and shmRingBytes
// (registered by RegisterShm, channels/register.cc). Types: sdk/native/channels.ts.
//
// Threads: everything here runs on the JS thread, except HandshakeWorker::Execute (a libuv
// worker thread: the blocking accept/connect and ring exchange of handshake.h).
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "channels/common.h"
#include "channels/shared.h"
#include "channels/shm/core.h"
#include "channels/shm/handshake.h"
#include "channels/shm/landing.h"
#include "channels/shm/ring.h"

namespace tprpc {
namespace channels {
namespace shm {
namespace {

thread_local Napi::FunctionReference* g_channel_ctor = nullptr;

// JS: ShmChannel { send(id, bytes): Promise<number>, recv(id, dest): Promise<number>, close(),
//                  readonly peerPid, readonly ringBytes }
class ShmChannel : public Napi::ObjectWrap<ShmChannel> {
 public:
  static Napi::Function Define(Napi::Env env) {
    Napi::Function f = DefineClass(env, "ShmChannel",
                                   {InstanceMethod<&ShmChannel::Send>("send"), InstanceMethod<&ShmChannel::Recv>("recv"),
                                    InstanceMethod<&ShmChannel::Close>("close"),
                                    InstanceMethod<&ShmChannel::Land>("land"),
                                    InstanceMethod<&ShmChannel::Adopt>("adopt"),
                                    InstanceMethod<&ShmChannel::TakeLanded>("takeLanded"),
                                    InstanceMethod<&ShmChannel::LandingStats>("landingStats"),
                                    InstanceMethod<&ShmChannel::Share>("share"),
                                    InstanceMethod<&ShmChannel::AdoptShared>("adoptShared"),
                                    InstanceMethod<&ShmChannel::TakeShared>("takeShared"),
                                    InstanceAccessor<&ShmChannel::PeerPid>("peerPid"),
                                    InstanceAccessor<&ShmChannel::RingBytes>("ringBytes"),
                                    InstanceAccessor<&ShmChannel::Closed>("closed")});
    g_channel_ctor = new Napi::FunctionReference(Napi::Persistent(f));
    return f;
  }

  // JS thread: wraps a connected handshake result in a new JS object.
  static Napi::Object Wrap(Napi::Env env, const Connected& c) {
    Napi::Object o = g_channel_ctor->New({});
    ShmChannel* self = Unwrap(o);
    self->core_ = std::make_shared<ShmCore>(c, Completer::Create(env, "tprpc.shm"));
    self->core_->Start();
    self->Ref();  // NB: an open channel lives until close(), even when JS drops it (its threads use it)
    return o;
  }

  explicit ShmChannel(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ShmChannel>(info) {}

 private:
  ShmCore* Live(Napi::Env env, const char* fn) {
    if (!core_) throw Napi::Error::New(env, std::string("ShmChannel.") + fn + ": not connected (use shmConnect/accept)");
    return core_.get();
  }

  Napi::Value Send(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    ShmCore* core = Live(env, "send");
    double id = NumberArg(info, 0, "ShmChannel.send", "id");
    Bytes b = BytesArg(info[1], "ShmChannel.send");
    Napi::Value promise;
    Completer::Job* job = core->completer()->Begin(env, info[1], &promise);
    Outcome why;
    if (closed_ || !core->PostSend({static_cast<uint64_t>(id), b.data, b.length, job}, &why))
      core->completer()->Settle(env, job, closed_ ? Outcome::Fail("ECHANNELCLOSED", 0, "shm channel: closed") : why);
    return promise;
  }

  Napi::Value Recv(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    ShmCore* core = Live(env, "recv");
    double id = NumberArg(info, 0, "ShmChannel.recv", "id");
    Bytes b = BytesArg(info[1], "ShmChannel.recv");
    Napi::Value promise;
    Completer::Job* job = core->completer()->Begin(env, info[1], &promise);
    Outcome why;
    if (closed_ || !core->PostRecv(static_cast<uint64_t>(id), {b.data, b.length, job}, &why))
      core->completer()->Settle(env, job, closed_ ? Outcome::Fail("ECHANNELCLOSED", 0, "shm channel: closed") : why);
    return promise;
  }

  // land(bytes) -> block id, or -1: the bytes are now in the peer's block (see ShmCore::Land).
  Napi::Value Land(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    ShmCore* core = Live(env, "land");
    Bytes b = BytesArg(info[0], "ShmChannel.land");
    int64_t id = closed_ ? -1 : core->Land(b.data, b.length);
    return Napi::Number::New(env, static_cast<double>(id));
  }

  // adopt(block, length) -> ArrayBuffer over our landing block `block` (which the peer filled);
  // the block is offered again once the buffer is collected. Throws when the peer named a block
  // it does not hold.
  Napi::Value Adopt(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    ShmCore* core = Live(env, "adopt");
    uint32_t id = static_cast<uint32_t>(NumberArg(info, 0, "ShmChannel.adopt", "block"));
    uint64_t length = static_cast<uint64_t>(NumberArg(info, 1, "ShmChannel.adopt", "length"));
    void* data = nullptr;
    std::string why;
    if (!core->landing()->Adopt(&env, id, length, &data, &why)) throw ToJsError(env, Outcome::Fail("EPROTO", 0, why));
    auto* ref = new LandRef{core->landing(), id};
    // NB: Node runs this finalizer on the JS thread (a setImmediate) after the collection that freed the buffer.
    return Napi::ArrayBuffer::New(
        env, data, length,
        [](Napi::Env env, void*, LandRef* r) {
          r->landing->Release(&env, r->id);
          delete r;
        },
        ref);
  }

  // takeLanded(block, dest): copies our landing block into dest and offers the block again.
  Napi::Value TakeLanded(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    ShmCore* core = Live(env, "takeLanded");
    uint32_t id = static_cast<uint32_t>(NumberArg(info, 0, "ShmChannel.takeLanded", "block"));
    Bytes b = BytesArg(info[1], "ShmChannel.takeLanded");
    void* data = nullptr;
    std::string why;
    if (!core->landing()->Adopt(nullptr, id, b.length, &data, &why)) throw ToJsError(env, Outcome::Fail("EPROTO", 0, why));
    std::memcpy(b.data, data, b.length);
    core->landing()->Release(nullptr, id);
    return env.Undefined();
  }

  // share(bytes) -> transfer id, or -1: the bytes' shared storage went to the peer (ShmCore::Share).
  Napi::Value Share(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    ShmCore* core = Live(env, "share");
    Bytes b = BytesArg(info[0], "ShmChannel.share");
    int64_t id = closed_ ? -1 : core->Share(b.data, b.length);
    return Napi::Number::New(env, static_cast<double>(id));
  }

  // The file and offset of the peer's shared transfer (argument 0: its id); throws when the channel
  // closed or the peer went away first.
  std::pair<int, uint64_t> TakeShareArg(const Napi::CallbackInfo& info, const char* method) {
    Napi::Env env = info.Env();
    ShmCore* core = Live(env, method);
    uint32_t id = static_cast<uint32_t>(NumberArg(info, 0, (std::string("ShmChannel.") + method).c_str(), "id"));
    int fd = -1;
    uint64_t offset = 0;
    std::string why;
    if (closed_ || !core->TakeShare(id, &fd, &offset, &why))
      throw ToJsError(env, Outcome::Fail("ECONNRESET", 0, closed_ ? "shm channel: closed" : why));
    return {fd, offset};
  }

  // adoptShared(id, length) -> ArrayBuffer mapping the peer's shared transfer `id` copy-on-write.
  Napi::Value AdoptShared(const Napi::CallbackInfo& info) {
    uint64_t length = static_cast<uint64_t>(NumberArg(info, 1, "ShmChannel.adoptShared", "length"));
    auto [fd, offset] = TakeShareArg(info, "adoptShared");
    return MapShared(info.Env(), fd, offset, length);
  }

  // takeShared(id, dest): copies the peer's shared transfer `id` into dest.
  Napi::Value TakeShared(const Napi::CallbackInfo& info) {
    Bytes b = BytesArg(info[1], "ShmChannel.takeShared");
    auto [fd, offset] = TakeShareArg(info, "takeShared");
    std::string why;
    if (!CopyShared(fd, offset, b.data, b.length, &why)) throw ToJsError(info.Env(), Outcome::Fail("EPROTO", 0, why));
    return info.Env().Undefined();
  }

  // landingStats() -> { offeredBytes, peerBytes, landedSends, sharedSends, peerFreeBlocks, queuedFrees,
  // socketFrees } (tests, debugging).
  Napi::Value LandingStats(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    o.Set("offeredBytes", Napi::Number::New(env, core_ ? static_cast<double>(core_->landing()->bytes()) : 0));
    o.Set("peerBytes", Napi::Number::New(env, core_ && !closed_ ? static_cast<double>(core_->peer_block_bytes()) : 0));
    o.Set("landedSends", Napi::Number::New(env, core_ ? static_cast<double>(core_->landed_sends()) : 0));
    o.Set("sharedSends", Napi::Number::New(env, core_ ? static_cast<double>(core_->shared_sends()) : 0));
    o.Set("peerFreeBlocks", Napi::Number::New(env, core_ && !closed_ ? static_cast<double>(core_->peer_free_blocks()) : 0));
    o.Set("queuedFrees", Napi::Number::New(env, core_ ? static_cast<double>(core_->landing()->queued_frees()) : 0));
    o.Set("socketFrees", Napi::Number::New(env, core_ ? static_cast<double>(core_->landing()->socket_frees()) : 0));
    return o;
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    if (core_ && !closed_) {
      closed_ = true;
      core_->Close(info.Env());
      Unref();
    }
    return info.Env().Undefined();
  }

  Napi::Value PeerPid(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), core_ ? core_->peer_pid() : 0);
  }
  Napi::Value RingBytes(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), core_ ? static_cast<double>(core_->ring_bytes()) : 0);
  }
  Napi::Value Closed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), closed_); }

  std::shared_ptr<ShmCore> core_;
  bool closed_ = false;
};

// Worker for accept (listener side) and connect: the blocking steps run off the JS thread.
class HandshakeWorker : public Napi::AsyncWorker {
 public:
  // listen_fd >= 0: accept on it (and close it); else connect to `name`.
  HandshakeWorker(Napi::Env env, int listen_fd, std::string name, int expected_pid, double timeout_ms)
      : Napi::AsyncWorker(env, "tprpc.shm.connect"),
        deferred_(Napi::Promise::Deferred::New(env)),
        listen_fd_(listen_fd),
        name_(std::move(name)),
        expected_pid_(expected_pid),
        deadline_(DeadlineMs(timeout_ms)) {}

  Napi::Value Promise() { return deferred_.Promise(); }

  void Execute() override {
    outcome_ = listen_fd_ >= 0 ? Accept(listen_fd_, expected_pid_, deadline_, &connected_)
                               : Connect(name_, expected_pid_, deadline_, &connected_);
  }

  void OnOK() override {
    Napi::Env env = Env();
    if (!outcome_.ok) {
      deferred_.Reject(ToJsError(env, outcome_).Value());
      return;
    }
    deferred_.Resolve(ShmChannel::Wrap(env, connected_));
  }

  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  int listen_fd_;
  std::string name_;
  int expected_pid_;
  int64_t deadline_;
  Outcome outcome_;
  Connected connected_;
};

// shmListen() -> { name, accept(expectedPid, timeoutMs): Promise<ShmChannel>, close() }
// One peer per listener: accept() may be called once; close() before it frees the socket.
Napi::Value ShmListen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string name;
  Outcome failed;
  int fd = Listen(&name, &failed);
  if (fd < 0) throw ToJsError(env, failed);
  auto state = std::make_shared<int>(fd);  // -1 once handed to accept() or closed
  Napi::Object o = Napi::Object::New(env);
  o.Set("name", Napi::String::New(env, name));
  o.Set("accept", Napi::Function::New(env, [state](const Napi::CallbackInfo& info) -> Napi::Value {
          Napi::Env env = info.Env();
          if (*state < 0) throw Napi::Error::New(env, "shm listener: accept() was already called, or close()");
          int pid = static_cast<int>(NumberArg(info, 0, "accept", "expectedPid"));
          double timeout = info.Length() > 1 && info[1].IsNumber() ? info[1].As<Napi::Number>().DoubleValue() : 0;
          auto* w = new HandshakeWorker(env, *state, "", pid, timeout);
          *state = -1;
          Napi::Value p = w->Promise();
          w->Queue();
          return p;
        }));
  o.Set("close", Napi::Function::New(env, [state](const Napi::CallbackInfo& info) -> Napi::Value {
          if (*state >= 0) close(*state);
          *state = -1;
          return info.Env().Undefined();
        }));
  return o;
}

// shmConnect(name, expectedPid, timeoutMs): Promise<ShmChannel>
Napi::Value ShmConnect(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) throw Napi::TypeError::New(env, "shmConnect(name, expectedPid, timeoutMs)");
  int pid = static_cast<int>(NumberArg(info, 1, "shmConnect", "expectedPid"));
  double timeout = info.Length() > 2 && info[2].IsNumber() ? info[2].As<Napi::Number>().DoubleValue() : 0;
  auto* w = new HandshakeWorker(env, -1, info[0].As<Napi::String>().Utf8Value(), pid, timeout);
  Napi::Value p = w->Promise();
  w->Queue();
  return p;
}

}  // namespace
}  // namespace shm

void RegisterShm(Napi::Env env, Napi::Object ns) {
  shm::ShmChannel::Define(env);
  ns.Set("shmListen", Napi::Function::New(env, shm::ShmListen));
  ns.Set("shmConnect", Napi::Function::New(env, shm::ShmConnect));
  ns.Set("shmRingBytes", Napi::Number::New(env, static_cast<double>(shm::RingBytesFromEnv())));
  RegisterShared(env, ns);
}

}  // namespace channels
}  // namespace tprpc
