// The ucx channel's data path: UCX's UCP tag API (libucp, loaded with dlopen by
// dynlib.cc; the declarations are in channels/ucx_api.h), so one code path covers shared
// memory, TCP, InfiniBand/RoCE and, with a CUDA-enabled UCX, GPU memory. UCX picks its
// transports from the UCX_* environment (UCX_TLS, UCX_NET_DEVICES, ...); TPRPC_UCX_TLS overrides
// UCX_TLS for tprpc only. On InfiniBand hosts the default (UCX_TLS unset)
// selects rc/ud/dc verbs transports on the active HCA ports; UCX_NET_DEVICES=mlx5_0:1
// pins one port. GPU memory needs a UCX built with cuda (cuda_copy, cuda_ipc, gdr_copy).
// UcxCore is one channel: a context, a worker, one endpoint to the peer and a progress thread;
// binding.cc holds the JS objects (UcxChannel, ucxCreate(), ucxInfo()).
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
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>

#include "channels/common.h"
#include "channels/ucx_api.h"

namespace tprpc {
namespace channels {
namespace ucx {

// Any thread: a failed outcome naming UCX's status.
Outcome UcsFail(const Ucp* ucp, const char* code, ucs_status_t st, const std::string& what);

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
  // Takes the context and worker ucxCreate set up; peer_errors: ask UCX to report a dead peer.
  UcxCore(const Ucp* ucp, void* context, void* worker, std::string address, bool peer_errors, Completer* done)
      : ucp_(ucp), context_(context), worker_(worker), address_(std::move(address)), done_(done), peer_errors_(peer_errors) {}

  // JS thread: starts the progress thread.
  void Start();

  // JS thread: queues a call for the progress thread; false (and *why) when the channel cannot take it.
  bool Post(Op op, Outcome* why);

  // JS thread, idempotent.
  void Close(Napi::Env env);

  const std::string& address() const { return address_; }
  Completer* completer() const { return done_; }

 private:
  void Wake();
  Outcome Broken();

  // Progress thread (UCX callbacks run inside worker calls there).
  static void OnPeerError(void* arg, void*, ucs_status_t st);
  void Complete(Inflight* f, ucs_status_t st);
  static void Fired(Inflight* f, void* request, ucs_status_t st);
  static void OnSend(void* request, ucs_status_t st, void* user);
  static void OnRecv(void* request, ucs_status_t st, const ucp_tag_recv_info_t* info, void* user);
  // Progress thread: starts one queued call.
  void Submit(Op op);
  // Progress thread: step 4 of the story.
  void Shutdown();
  void Loop();

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

}  // namespace ucx
}  // namespace channels
}  // namespace tprpc
