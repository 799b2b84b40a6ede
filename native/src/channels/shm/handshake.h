// How two processes on one host connect an shm channel: an abstract unix socket, over which each
// side hands the other its outgoing ring (ring.h) and checks who the peer is. The socket then stays
// open to carry landing messages (landing.h) and to notice the peer's death (EOF).
//
// Nothing is named in /dev/shm: each ring is a memfd handed to the peer over the socket
// (SCM_RIGHTS) and closed right after mapping, so a ring dies with the last process that maps it,
// whatever way that process ends.
//
// Connection:
//  1. The listener binds "\0tprpc-shm-<pid>-<random>" (Listen, JS thread) and sends that name to
//     the peer over the pipe's control connection.
//  2. The peer connects (Connect); the listener accepts one connection and closes its listening
//     socket (Accept).
//  3. Each side creates its outgoing ring (memfd, mapped pre-faulted), sends
//     Hello{magic, version, pid, ring bytes} with the memfd attached, reads the
//     peer's Hello and memfd, maps it as its incoming ring and closes both fds.
//  4. Each side checks SO_PEERCRED: the socket's peer must be the pid the
//     (authenticated) control connection announced, so no other local process
//     can slip into the channel.
//
// Threads: Listen() on the JS thread; Accept() and Connect() (steps 2-4) block, and run on a libuv
// worker thread (binding.cc's HandshakeWorker).
#pragma once
#include <cstdint>
#include <string>

#include "channels/common.h"
#include "channels/shm/ring.h"

namespace tprpc {
namespace channels {
namespace shm {

// Everything a connected channel needs; filled on a worker thread by the handshake.
struct Connected {
  int sock = -1;
  int peer_pid = 0;
  Ring out, in;
};

// JS thread, step 1: a listening socket on a new abstract name (*name); -1 and *o when it failed.
int Listen(std::string* name, Outcome* o);

// Worker thread, steps 2-4 on the listener's side: waits for the peer on `listen_fd` (and closes it),
// then hands over the rings. `deadline` is from DeadlineMs(); expected_pid 0 skips the pid check.
Outcome Accept(int listen_fd, int expected_pid, int64_t deadline, Connected* c);

// Worker thread, steps 2-4 on the connecting side: connects to the listener's `name`, then hands
// over the rings.
Outcome Connect(const std::string& name, int expected_pid, int64_t deadline, Connected* c);

// The steady-clock time in ms at which `timeout_ms` from now runs out; -1 (none) unless it is positive.
int64_t DeadlineMs(double timeout_ms);

}  // namespace shm
}  // namespace channels
}  // namespace tprpc
