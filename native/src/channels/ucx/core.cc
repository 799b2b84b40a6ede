// UcxCore (core.h): one ucx channel's progress thread, which alone touches the UCX worker: it
// submits the calls JS queued (Post, JS thread), progresses the worker, turns UCX's completions
// into settled promises, and tears everything down on close. Close() itself runs on the JS thread.
#include "channels/ucx/core.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <vector>

namespace tprpc {
namespace channels {
namespace ucx {
namespace {

// Statuses by which a request tells that its peer went away (before or without the error handler).
bool PeerLost(ucs_status_t st) {
  return st == UCS_ERR_CONNECTION_RESET || st == UCS_ERR_ENDPOINT_TIMEOUT || st == UCS_ERR_UNREACHABLE ||
         st == UCS_ERR_IO_ERROR;
}

}  // namespace

Outcome UcsFail(const Ucp* ucp, const char* code, ucs_status_t st, const std::string& what) {
  return Outcome::Fail(code, 0, "ucx channel: " + what + ": " + ucp->status_string(st) + " (" + std::to_string(st) + ")");
}

void UcxCore::Start() {
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  thread_ = std::thread([this] { Loop(); });
}

bool UcxCore::Post(Op op, Outcome* why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closing_.load()) return *why = Outcome::Fail("ECHANNELCLOSED", 0, "ucx channel: closed"), false;
  if (!broken_.ok) return *why = broken_, false;
  ops_.push_back(std::move(op));
  Wake();
  return true;
}

void UcxCore::Close(Napi::Env env) {
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

void UcxCore::Wake() {
  uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof one) < 0) {
    // NB: only fails when the counter is saturated, and then the thread is awake anyway.
  }
}

Outcome UcxCore::Broken() {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

void UcxCore::OnPeerError(void* arg, void*, ucs_status_t st) {
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

void UcxCore::Complete(Inflight* f, ucs_status_t st) {
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

void UcxCore::Fired(Inflight* f, void* request, ucs_status_t st) {
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

void UcxCore::OnSend(void* request, ucs_status_t st, void* user) { Fired(static_cast<Inflight*>(user), request, st); }

void UcxCore::OnRecv(void* request, ucs_status_t st, const ucp_tag_recv_info_t* info, void* user) {
  auto* f = static_cast<Inflight*>(user);
  if (info != nullptr) f->info = *info;
  Fired(f, request, st);
}

void UcxCore::Submit(Op op) {
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

void UcxCore::Shutdown() {
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

void UcxCore::Loop() {
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

}  // namespace ucx
}  // namespace channels
}  // namespace tprpc
