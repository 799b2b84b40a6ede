// The shm channel's handshake (handshake.h): the abstract unix socket, the Hello exchange that hands
// each side the peer's ring, and the SO_PEERCRED check. Threads: Listen() on the JS thread, the rest
// on a libuv worker thread.
#include "channels/shm/handshake.h"

#include <errno.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <random>

namespace tprpc {
namespace channels {
namespace shm {
namespace {

constexpr uint32_t kVersion = 2;  // 2: landing blocks are freed through the ring header's FreeQueue (ring.h)

struct Hello {
  uint64_t magic;
  uint32_t version;
  uint32_t pid;
  uint64_t ring_bytes;
};

bool WaitFd(int fd, short events, int64_t deadline_ms, Outcome* o, const char* what) {
  for (;;) {
    int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count();
    int left = deadline_ms < 0 ? -1 : static_cast<int>(std::max<int64_t>(0, deadline_ms - now));
    struct pollfd p = {fd, events, 0};
    int n = poll(&p, 1, left);
    if (n > 0) return true;
    if (n == 0) {
      *o = Outcome::Fail("ETIMEDOUT", ETIMEDOUT, std::string("shm channel: timed out ") + what);
      return false;
    }
    if (errno != EINTR) {
      *o = Outcome::Fail("ESHM", errno, std::string("shm channel: poll failed ") + what);
      return false;
    }
  }
}

// Steps 3-4 of the connection story, on a worker thread. Takes ownership of `sock`.
Outcome Handshake(int sock, int expected_pid, int64_t deadline, Connected* c) {
  Outcome o;
  uint64_t cap = RingBytesFromEnv();
  int memfd = memfd_create("tprpc-shm-ring", MFD_CLOEXEC);
  std::string why;
  if (memfd < 0) {
    o = Outcome::Fail("EMFD", errno, "shm channel: memfd_create failed for a ring");
  } else if (ftruncate(memfd, static_cast<off_t>(kHeaderBytes + cap)) != 0) {
    o = Outcome::Fail("ENOMEM", errno,
                      "shm channel: could not size a " + std::to_string(cap) +
                          "-byte ring; lower TPRPC_SHM_RING_BYTES or raise the memory limit");
  } else if (!MapRing(memfd, cap, true, &c->out, &why)) {
    o = Outcome::Fail("ENOMEM", errno, "shm channel: " + why);
  }
  if (o.ok) {
    Hello hello = {kMagic, kVersion, static_cast<uint32_t>(getpid()), cap};
    struct iovec iov = {&hello, sizeof hello};
    char ctrl[CMSG_SPACE(sizeof(int))] = {};
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl;
    msg.msg_controllen = sizeof ctrl;
    struct cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &memfd, sizeof(int));
    if (sendmsg(sock, &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof hello))
      o = Outcome::Fail("ECONNRESET", errno, "shm channel: could not send the ring to the peer");
  }
  if (memfd >= 0) close(memfd);  // NB: the mapping (ours, and the peer's once it maps) keeps the ring alive.
  Hello peer = {};
  int peer_fd = -1;
  if (o.ok && WaitFd(sock, POLLIN, deadline, &o, "waiting for the peer's ring")) {
    struct iovec iov = {&peer, sizeof peer};
    char ctrl[CMSG_SPACE(sizeof(int))] = {};
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl;
    msg.msg_controllen = sizeof ctrl;
    ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    for (struct cmsghdr* cm = CMSG_FIRSTHDR(&msg); n > 0 && cm != nullptr; cm = CMSG_NXTHDR(&msg, cm))
      if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) std::memcpy(&peer_fd, CMSG_DATA(cm), sizeof(int));
    if (n != static_cast<ssize_t>(sizeof peer) || peer_fd < 0)
      o = Outcome::Fail("ECONNRESET", n < 0 ? errno : 0, "shm channel: the peer closed before sending its ring");
    else if (peer.magic != kMagic || peer.version != kVersion)
      o = Outcome::Fail("EPROTO", 0, "shm channel: the peer speaks another ring protocol (mixed tprpc versions?)");
  }
  if (o.ok) {
    struct ucred cred = {};
    socklen_t len = sizeof cred;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
      o = Outcome::Fail("ESHM", errno, "shm channel: SO_PEERCRED failed");
    else if (expected_pid > 0 && cred.pid != expected_pid)
      o = Outcome::Fail("EPERM", 0,
                        "shm channel: process " + std::to_string(cred.pid) + " answered instead of the expected peer " +
                            std::to_string(expected_pid) + "; the channel was refused");
    else if (peer.pid != static_cast<uint32_t>(cred.pid))
      o = Outcome::Fail("EPERM", 0, "shm channel: the peer's Hello names another pid than its socket");
  }
  if (o.ok && !MapRing(peer_fd, peer.ring_bytes, false, &c->in, &why)) o = Outcome::Fail("ENOMEM", errno, "shm channel: " + why);
  if (peer_fd >= 0) close(peer_fd);
  if (!o.ok) {
    c->out.Unmap();
    c->in.Unmap();
    close(sock);
    return o;
  }
  c->sock = sock;
  c->peer_pid = static_cast<int>(peer.pid);
  return o;
}

std::string RandomName() {
  std::random_device rd;
  char buf[96];
  std::snprintf(buf, sizeof buf, "tprpc-shm-%d-%08x%08x", static_cast<int>(getpid()), rd(), rd());
  return buf;
}

socklen_t AbstractAddress(const std::string& name, struct sockaddr_un* addr) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  size_t n = std::min(name.size(), sizeof(addr->sun_path) - 1);
  std::memcpy(addr->sun_path + 1, name.data(), n);  // NB: sun_path[0] == 0: abstract namespace, no file
  return static_cast<socklen_t>(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

}  // namespace

int Listen(std::string* name, Outcome* o) {
  *name = RandomName();
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un addr;
  socklen_t len = AbstractAddress(*name, &addr);
  if (fd < 0 || bind(fd, reinterpret_cast<struct sockaddr*>(&addr), len) != 0 || listen(fd, 1) != 0) {
    int err = errno;
    if (fd >= 0) close(fd);
    *o = Outcome::Fail("ESHM", err, "shm channel: could not listen on an abstract unix socket");
    return -1;
  }
  return fd;
}

Outcome Accept(int listen_fd, int expected_pid, int64_t deadline, Connected* c) {
  Outcome o;
  int sock = -1;
  if (WaitFd(listen_fd, POLLIN, deadline, &o, "waiting for the peer to connect")) {
    sock = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (sock < 0) o = Outcome::Fail("ECONNABORTED", errno, "shm channel: accept failed (listener closed?)");
  }
  close(listen_fd);
  if (sock < 0) return o;
  return Handshake(sock, expected_pid, deadline, c);
}

Outcome Connect(const std::string& name, int expected_pid, int64_t deadline, Connected* c) {
  int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un addr;
  socklen_t len = AbstractAddress(name, &addr);
  if (sock < 0 || connect(sock, reinterpret_cast<struct sockaddr*>(&addr), len) != 0) {
    Outcome o = Outcome::Fail("ECONNREFUSED", errno,
                              "shm channel: could not reach the peer's socket @" + name +
                                  " (is it on this host and in this network namespace?)");
    if (sock >= 0) close(sock);
    return o;
  }
  return Handshake(sock, expected_pid, deadline, c);
}

int64_t DeadlineMs(double timeout_ms) {
  if (!(timeout_ms > 0)) return -1;
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
             .count() +
         static_cast<int64_t>(timeout_ms);
}

}  // namespace shm
}  // namespace channels
}  // namespace tprpc
