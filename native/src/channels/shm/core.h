// The shm channel: two processes on one host exchange buffers through two single-producer/
// single-consumer byte rings in shared memory (one per direction). ShmCore is one connected
// channel: its rings, its threads and the queues between them and JS. The parts live next door:
//   ring.h       the ring's layout and its copy loops
//   landing.h    landing blocks: one copy instead of two for 64 KiB - 64 MiB transfers
//   handshake.h  connecting two processes and handing over the rings (the socket, SO_PEERCRED)
//   binding.cc   the JS objects: ShmChannel, shmListen(), shmConnect()
//
// Transfer (send(id, bytes) / recv(id, dest), any order of calls):
//  1. The sender thread writes records [id u64][length u64][bytes] into the
//     outgoing ring in send() order (Ring::Write).
//  2. The receiver thread reads the next record header, waits until JS posted a
//     recv() for that id (the control message naming it may still be on its
//     way), and copies the bytes into the posted buffer.
//  3. Peer death: the watcher thread sees EOF on the socket and sets peer_gone;
//     a sender fails at once, a receiver after draining what the peer wrote.
//     (The socket otherwise carries only the landing and share messages.)
//
// Shared storages (zero copies; channels/shared.cc): a buffer of at least kLandMin bytes that lies
// in a shared storage (Tensor.shareMemory_, or one received this way) whose file still holds its
// bytes goes as the file itself: share() (JS thread) freezes the file if needed and sends kMsgShare
// with the memfd and the offset over the socket before the descriptor leaves; the peer's watcher
// keeps the descriptor by transfer id; adoptShared() maps that range copy-on-write as the received
// buffer (takeShared() copies it out instead). Both sides keep value semantics (see shared.cc).
//
// Threads: JS thread (calls, close), one sender, one receiver and one watcher
// thread per channel. Promises settle on the JS thread (channels/common.h).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

#include "channels/common.h"
#include "channels/shm/handshake.h"
#include "channels/shm/landing.h"

namespace tprpc {
namespace channels {
namespace shm {

struct SendJob {
  uint64_t id;
  const char* data;
  uint64_t length;
  Completer::Job* job;
};

struct RecvJob {
  char* data;
  uint64_t length;
  Completer::Job* job;
};

// A connected channel: rings, threads and queues. Shared by the JS object and its threads.
class ShmCore {
 public:
  ShmCore(const Connected& c, Completer* done);

  // JS thread: starts the sender, receiver and watcher threads.
  void Start();

  // JS thread. False (and *why) when the channel can no longer take the call.
  bool PostSend(const SendJob& j, Outcome* why);
  bool PostRecv(uint64_t id, const RecvJob& j, Outcome* why);

  // JS thread, idempotent: stops the threads, rejects what is still queued, unmaps the rings.
  void Close(Napi::Env env);

  // JS thread: copies `length` bytes into a free block the peer offered (of a fitting size class)
  // and returns its id, or -1 when there is none (then the transfer goes through the ring).
  int64_t Land(const char* data, uint64_t length);

  // JS thread: hands the peer the shared storage that holds these bytes (see "Shared storages");
  // returns the transfer's id, or -1 when they are not in one (then they are copied as usual).
  int64_t Share(const char* data, uint64_t length);

  // JS thread: the file and offset of shared transfer `id` (its kMsgShare went out before the
  // descriptor, so it is on its way to the watcher); false and *why when the peer is gone first.
  bool TakeShare(uint32_t id, int* fd, uint64_t* offset, std::string* why);

  std::shared_ptr<Landing> landing() const { return landing_; }
  uint64_t shared_sends() const { return next_share_; }
  uint64_t landed_sends() const { return peer_blocks_.landed_sends(); }
  uint64_t peer_block_bytes() { return peer_blocks_.bytes(); }
  uint64_t peer_free_blocks() { return peer_blocks_.free_blocks(); }

  int peer_pid() const { return c_.peer_pid; }
  uint64_t ring_bytes() const { return c_.out.cap; }
  Completer* completer() const { return done_; }

 private:
  bool Usable(Outcome* why);
  // JS thread: the socket shows the peer's end now (the watcher thread may not have run yet).
  bool PeerHungUp();
  Outcome PeerGone() const;
  void WakeAll();

  // Sender thread: copies n bytes into the outgoing ring; receiver thread: out of the incoming one
  // (dst may be null: discard). False and *o when the channel closed or the peer is gone.
  bool Write(const char* src, uint64_t n, Outcome* o);
  bool Read(char* dst, uint64_t n, Outcome* o);

  void SendLoop();  // sender thread
  void RecvLoop();  // receiver thread
  // A thread hit a fatal error: every queued and future call fails with it.
  void Break(const Outcome& o);

  // Watcher thread: one message from the peer's socket; false at its end.
  bool TakeLandMsg();
  void Watch();  // watcher thread

  Connected c_;
  Completer* done_;
  int wake_fd_ = -1;
  std::thread sender_, receiver_, watcher_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SendJob> sends_;
  std::unordered_map<uint64_t, RecvJob> recvs_;
  Outcome broken_;  // !ok once a fatal error happened (guarded by mu_)
  std::atomic<bool> closing_{false}, peer_gone_{false};
  bool closed_ = false;  // JS thread
  std::shared_ptr<Landing> landing_;  // blocks we offer the peer
  PeerBlocks peer_blocks_;            // blocks the peer offered us
  uint32_t next_share_ = 0;    // JS thread: id of our next shared transfer
  std::mutex share_mu_;        // JS thread (TakeShare) and watcher thread (kMsgShare)
  std::condition_variable share_cv_;
  std::map<uint32_t, std::pair<int, uint64_t>> shares_in_;  // the peer's shared transfers not yet taken: fd, offset
};

}  // namespace shm
}  // namespace channels
}  // namespace tprpc
