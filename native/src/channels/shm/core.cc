// ShmCore (core.h): one connected shm channel. Threads: the JS thread posts calls, lands and
// shares buffers, and closes; the sender thread (SendLoop) writes the outgoing ring; the receiver
// thread (RecvLoop) reads the incoming ring into posted buffers; the watcher thread (Watch) reads
// the socket: the peer's landing and share messages, and its end.
#include "channels/shm/core.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "channels/shared.h"

namespace tprpc {
namespace channels {
namespace shm {

ShmCore::ShmCore(const Connected& c, Completer* done)
    : c_(c), done_(done), landing_(std::make_shared<Landing>(c.sock, LandBudgetFromEnv(), &c.in.h->frees)),
      peer_blocks_(c.sock, &c.out.h->frees) {}

void ShmCore::Start() {
  wake_fd_ = eventfd(0, EFD_CLOEXEC);
  sender_ = std::thread([this] { SendLoop(); });
  receiver_ = std::thread([this] { RecvLoop(); });
  watcher_ = std::thread([this] { Watch(); });
}

bool ShmCore::PostSend(const SendJob& j, Outcome* why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!Usable(why)) return false;
  if (peer_gone_.load() || PeerHungUp()) return *why = PeerGone(), false;
  sends_.push_back(j);
  cv_.notify_all();
  return true;
}

bool ShmCore::PostRecv(uint64_t id, const RecvJob& j, Outcome* why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!Usable(why)) return false;
  if (recvs_.count(id) != 0) {
    *why = Outcome::Fail("EINVAL", 0, "shm channel: recv(" + std::to_string(id) + ") is already posted");
    return false;
  }
  recvs_.emplace(id, j);
  cv_.notify_all();
  return true;
}

void ShmCore::Close(Napi::Env env) {
  if (closed_) return;
  closed_ = true;
  closing_.store(true);
  uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof one) < 0) {
    // NB: cannot fail for an eventfd below its maximum; the threads also poll closing_.
  }
  WakeAll();
  sender_.join();
  receiver_.join();
  watcher_.join();
  Outcome closed = Outcome::Fail("ECHANNELCLOSED", 0, "shm channel: closed before the transfer finished");
  for (auto& j : sends_) done_->Settle(env, j.job, closed);
  for (auto& kv : recvs_) done_->Settle(env, kv.second.job, broken_.ok ? closed : broken_);
  sends_.clear();
  recvs_.clear();
  done_->Release();
  landing_->Close();  // NB: before the socket closes: a later finalizer must not write to a reused fd
  close(c_.sock);
  peer_blocks_.Close();
  for (auto& kv : shares_in_) close(kv.second.first);
  shares_in_.clear();
  close(wake_fd_);
  c_.out.Unmap();
  c_.in.Unmap();
}

int64_t ShmCore::Land(const char* data, uint64_t length) {
  if (closing_.load() || peer_gone_.load()) return -1;
  return peer_blocks_.Land(data, length);
}

int64_t ShmCore::Share(const char* data, uint64_t length) {
  if (length < kLandMin || closing_.load() || peer_gone_.load()) return -1;
  int fd = -1;
  uint64_t offset = 0;
  if (!SharedSpanOf(data, length, &fd, &offset)) return -1;
  uint32_t id = next_share_;
  if (!SendLandMsg(c_.sock, {kMsgShare, id, offset}, fd)) return -1;
  ++next_share_;
  return id;
}

bool ShmCore::TakeShare(uint32_t id, int* fd, uint64_t* offset, std::string* why) {
  std::unique_lock<std::mutex> lock(share_mu_);
  bool got = share_cv_.wait_for(lock, std::chrono::seconds(10), [&] {
    return shares_in_.count(id) != 0 || closing_.load() || peer_gone_.load();
  });
  auto it = shares_in_.find(id);
  if (it == shares_in_.end()) {
    *why = got ? "shm channel: the peer left before shared transfer " + std::to_string(id) + " arrived"
               : "shm channel: shared transfer " + std::to_string(id) + " did not arrive within 10 s";
    return false;
  }
  *fd = it->second.first;
  *offset = it->second.second;
  shares_in_.erase(it);
  return true;
}

bool ShmCore::Usable(Outcome* why) {
  if (closing_.load()) {
    *why = Outcome::Fail("ECHANNELCLOSED", 0, "shm channel: closed; open a new pipe");
    return false;
  }
  if (!broken_.ok) {
    *why = broken_;
    return false;
  }
  return true;
}

bool ShmCore::PeerHungUp() {
  struct pollfd p = {c_.sock, POLLRDHUP, 0};  // NB: not POLLIN: the peer's landing messages are readable data
  if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) peer_gone_.store(true);
  return peer_gone_.load();
}

Outcome ShmCore::PeerGone() const {
  return Outcome::Fail("ECONNRESET", ECONNRESET,
                       "shm channel: peer process " + std::to_string(c_.peer_pid) +
                           " closed the channel (exited or crashed) during a transfer");
}

void ShmCore::WakeAll() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  {
    std::lock_guard<std::mutex> lock(share_mu_);
    share_cv_.notify_all();
  }
  c_.out.WakeWriter();
  c_.in.WakeReader();
}

bool ShmCore::Write(const char* src, uint64_t n, Outcome* o) {
  RingStop stop = RingStop::kNone;
  if (c_.out.Write(src, n, closing_, peer_gone_, &stop)) return true;
  *o = stop == RingStop::kClosed ? Outcome::Fail("ECHANNELCLOSED", 0, "shm channel: closed during a send") : PeerGone();
  return false;
}

bool ShmCore::Read(char* dst, uint64_t n, Outcome* o) {
  RingStop stop = RingStop::kNone;
  if (c_.in.Read(dst, n, closing_, peer_gone_, &stop)) return true;
  *o = stop == RingStop::kClosed ? Outcome::Fail("ECHANNELCLOSED", 0, "shm channel: closed during a recv") : PeerGone();
  return false;
}

void ShmCore::SendLoop() {
  for (;;) {
    SendJob j;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return closing_.load() || !sends_.empty(); });
      if (closing_.load()) return;
      j = sends_.front();
      sends_.pop_front();
    }
    uint64_t rec[2] = {j.id, j.length};
    Outcome o;
    if (Write(reinterpret_cast<const char*>(rec), sizeof rec, &o)) Write(j.data, j.length, &o);

    done_->Finish(j.job, o);
    if (!o.ok) Break(o);
  }
}

void ShmCore::RecvLoop() {
  for (;;) {
    uint64_t rec[2];
    Outcome o;
    if (!Read(reinterpret_cast<char*>(rec), sizeof rec, &o)) return Break(o);
    RecvJob j;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // NB: not woken by peer death: the peer may have written everything and exited;
      // the recv() naming this record is still on its way over the control connection.
      cv_.wait(lock, [&] { return closing_.load() || recvs_.count(rec[0]) != 0; });
      if (closing_.load()) return;
      auto it = recvs_.find(rec[0]);
      j = it->second;
      recvs_.erase(it);
    }
    if (j.length != rec[1]) {
      Outcome bad = Outcome::Fail("EPROTO", 0,
                                  "shm channel: transfer " + std::to_string(rec[0]) + " carries " +
                                      std::to_string(rec[1]) + " bytes but recv() posted a buffer of " +
                                      std::to_string(j.length));
      done_->Finish(j.job, bad);
      if (!Read(nullptr, rec[1], &o)) return Break(o);
      continue;
    }
    if (Read(j.data, j.length, &o)) landing_->MaybeOffer(j.length);

    done_->Finish(j.job, o);
    if (!o.ok) return Break(o);
  }
}

void ShmCore::Break(const Outcome& o) {
  std::deque<SendJob> sends;
  std::unordered_map<uint64_t, RecvJob> recvs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_.load()) return;  // Close() settles what is queued
    if (broken_.ok) broken_ = o;
    sends.swap(sends_);
    recvs.swap(recvs_);
  }
  for (auto& j : sends) done_->Finish(j.job, broken_);
  for (auto& kv : recvs) done_->Finish(kv.second.job, broken_);
}

// Watcher thread: the peer's landing offers (kMsgOffer with the block's memfd, which we map) and
// frees, its revocations and shared transfers; end of file (or an error) on the socket is the peer's end.
bool ShmCore::TakeLandMsg() {
  LandMsg m = {};
  struct iovec iov = {&m, sizeof m};
  char ctrl[CMSG_SPACE(sizeof(int))] = {};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctrl;
  msg.msg_controllen = sizeof ctrl;
  ssize_t n;
  do n = recvmsg(c_.sock, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  while (n < 0 && errno == EINTR);
  int fd = -1;
  for (struct cmsghdr* cm = CMSG_FIRSTHDR(&msg); n > 0 && cm != nullptr; cm = CMSG_NXTHDR(&msg, cm))
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) std::memcpy(&fd, CMSG_DATA(cm), sizeof(int));
  if (n != static_cast<ssize_t>(sizeof m)) {
    if (fd >= 0) close(fd);
    return false;
  }
  if (m.type == kMsgShare) {
    std::lock_guard<std::mutex> lock(share_mu_);
    if (fd < 0 || shares_in_.count(m.id) != 0) return fd >= 0 ? (close(fd), false) : false;  // NB: a broken peer
    shares_in_[m.id] = {fd, m.cap};
    share_cv_.notify_all();
    return true;
  }
  if (m.type == kMsgRevoked) {
    if (fd >= 0) close(fd);
    landing_->Revoked(m.id);
    return true;
  }
  if (m.type == kMsgOffer) peer_blocks_.Offered(m.id, m.cap, fd);
  else if (m.type == kMsgFree) peer_blocks_.Freed(m.id);
  else if (m.type == kMsgRevoke) peer_blocks_.Revoke(m.id);
  if (fd >= 0) close(fd);
  return true;
}

void ShmCore::Watch() {
  struct pollfd p[2] = {{c_.sock, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  const auto idle = LandIdleFromEnv();
  for (;;) {
    int n = poll(p, 2, 1000);
    if (n < 0 && errno == EINTR) continue;
    if (closing_.load() || (p[1].revents & POLLIN)) return;
    if (n == 0) {
      landing_->ReleaseIdle(idle);  // NB: after each second without a message on the socket
      peer_blocks_.PollFrees();
      continue;
    }
    if (n > 0 && p[0].revents != 0 && !((p[0].revents & POLLIN) && TakeLandMsg())) {
      peer_gone_.store(true, std::memory_order_release);
      WakeAll();
      // The receiver fails once it drained the ring; the sender fails at its next wait.
      // Posted recvs that will never see a record are failed here, when nothing is in flight.
      std::deque<SendJob> sends;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (closing_.load()) return;
        sends.swap(sends_);
        if (broken_.ok && sends.size() > 0) broken_ = PeerGone();
      }
      for (auto& j : sends) done_->Finish(j.job, PeerGone());
      return;
    }
  }
}

}  // namespace shm
}  // namespace channels
}  // namespace tprpc
