// The shm channel's landing blocks: receive buffers in shared memory that the peer writes straight
// into, one copy per transfer instead of two through the ring (ring.h). Landing holds our blocks
// (we receive into them), PeerBlocks the ones the peer offered us (we send into them); the two
// processes talk about blocks over the channel's socket with LandMsg messages.
//
// Landing (one copy instead of two, for transfers of kLandMin..kLandMax bytes):
//  1. After a ring transfer of such a size, the receiver's receiver thread creates up to kLandBurst
//     blocks of its size class (memfd, mapped populated) and sends each to the peer over the socket
//     (kMsgOffer + SCM_RIGHTS); the peer's watcher thread maps it (populated) as free.
//  2. The sender's land() (JS thread) copies the bytes into a free block of the class at once and
//     names the block in the transfer's descriptor (sdk/channel/shm/tagged_channel.ts); no ring,
//     no thread hand-off.
//  3. The receiver's adopt() makes the block the received ArrayBuffer itself; when V8 frees that
//     buffer, the finalizer pushes the block's id on the ring header's FreeQueue (ring.h; kMsgFree on
//     the socket when the queue is full) and the peer may fill the block again: it takes the queue's
//     ids on its next land(), so a free wakes no thread. takeLanded() copies a block out instead (a
//     receiver with its own destination) and frees it at once.
//  4. Blocks stay within TPRPC_SHM_LANDING_BYTES (default 256 MiB) per channel and direction and
//     ClassLimit() per class; without a free block the transfer goes through the ring. They are
//     unmapped when the channel closes, or (adopted ones) when their buffer is freed after that.
//  5. When a block of a new size does not fit the budget, the receiver asks for free blocks of other
//     sizes unused for kLandIdle back (kMsgRevoke); the sender unmaps each once it is free on its side
//     (at once, or once the free notice of a transfer in flight arrives: on its next land(), or within a
//     second from the watcher) and answers kMsgRevoked, and the
//     receiver unmaps it too. The next ring transfer of the new size then finds room for its blocks.
//     Blocks unused for TPRPC_SHM_LANDING_IDLE_S (default 30 s) are asked back the same way, so a
//     quiet channel returns the memory a burst of transfers made.
//  NB: the peer has our free blocks mapped writable; it is the authenticated, same-uid process
//  of the handshake, and it writes a block only between our offer and its descriptor.
//
// Threads: each method says which thread calls it (the channel's threads are described in core.h).
#pragma once
#include <napi.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "channels/shm/ring.h"

namespace tprpc {
namespace channels {
namespace shm {

constexpr uint64_t kLandMin = 64 << 10;   // smaller transfers go through the ring
constexpr uint64_t kLandMax = 64ull << 20; // larger ones too (their copy runs off the JS thread there)
constexpr uint32_t kMsgOffer = 1, kMsgFree = 2, kMsgShare = 3, kMsgRevoke = 4, kMsgRevoked = 5;

// Socket message after the handshake (both directions): kMsgOffer carries the block's memfd;
// kMsgShare carries a shared storage's memfd, `id` is the transfer and `cap` its offset in the file;
// kMsgRevoke (owner -> filler) asks for block `id` back, kMsgRevoked (filler -> owner) says the filler
// unmapped it and will not name it again.
struct LandMsg {
  uint32_t type;
  uint32_t id;
  uint64_t cap;
};

// Any thread: sends `m` on the channel's socket, with `fd` attached (SCM_RIGHTS) when >= 0; false
// when the socket refused it (never blocks).
bool SendLandMsg(int sock, const LandMsg& m, int fd);

// How long a landing block may go unused before the receiver asks for it back even when no other size
// needs the room (TPRPC_SHM_LANDING_IDLE_S, default 30 s), so that memory a burst of transfers made
// is returned.
std::chrono::milliseconds LandIdleFromEnv();

// Bytes of landing blocks a channel may offer its peer (TPRPC_SHM_LANDING_BYTES, default 256 MiB).
uint64_t LandBudgetFromEnv();

// The block size for a transfer of n bytes: 4 classes per power of two (<= 25% slack), whole pages.
uint64_t LandClass(uint64_t n);

// Our landing blocks (we receive into them; the peer maps and fills them). Shared by the channel and
// by every ArrayBuffer handed out over a block (its finalizer), so it outlives a closed channel.
// States: offered (the peer may fill it; it names the block in a descriptor) -> adopted (a JS
// ArrayBuffer views it) -> offered again once that buffer is collected (a free notice tells the peer).
class Landing {
 public:
  // `frees`: the FreeQueue in the header of the ring we consume (the peer fills our blocks).
  Landing(int sock, uint64_t budget, FreeQueue* frees) : sock_(sock), budget_(budget), frees_(frees) {}

  // Receiver thread, after a ring transfer of n bytes: offers the peer up to kLandBurst more blocks of
  // its class while the class has fewer than kLandPerClass blocks and the budget allows.
  void MaybeOffer(uint64_t n);

  // JS thread: the block the peer filled, for a buffer of `length` bytes; false (and *why) when the
  // descriptor names no offered block of at least that size (a broken or hostile peer).
  // With `env` (the block becomes an ArrayBuffer), also settles what V8 is told; see Account().
  bool Adopt(Napi::Env* env, uint32_t id, uint64_t length, void** data, std::string* why);

  // JS thread: the block is free again (its buffer was collected, or copied out): offer it again,
  // or unmap it once the channel closed.
  void Release(Napi::Env* env, uint32_t id);

  // Watcher thread, after each second without a message on the socket: asks for every free block unused
  // for `idle` back (kMsgRevoke; Revoked() unmaps it).
  void ReleaseIdle(std::chrono::milliseconds idle);

  // Watcher thread: the peer gave block `id` back (kMsgRevoke answered): unmaps it, which frees budget
  // for other sizes. A block a buffer still views (a broken peer) stays.
  void Revoked(uint32_t id);

  // JS thread, when the channel closes (before its socket is closed): unmaps every block no buffer views.
  void Close();

  uint64_t bytes();
  // Free notices sent so far: through the FreeQueue, and by socket (kMsgFree, the queue being full).
  uint64_t queued_frees();
  uint64_t socket_frees();

 private:
  struct Block {
    void* ptr;
    uint64_t cap;
    bool adopted;
    bool hidden;      // adopted, and its length taken off V8's external memory (Account)
    uint64_t length;  // of the adopted buffer
    bool revoking;    // asked back (kMsgRevoke); unmapped once the peer says kMsgRevoked
    std::chrono::steady_clock::time_point used;  // offered or last adopted
  };

  // Receiver thread: creates one block for a transfer of n bytes and offers it; false when it did not.
  bool OfferOne(uint64_t n);
  // mu_ held, JS thread: what V8 is told about adopted blocks (see landing.cc).
  void Account(Napi::Env env, uint32_t id);
  // Receiver thread, mu_ held, when a block of capacity `cap` does not fit the budget: asks the peer
  // for free blocks of other sizes back (kMsgRevoke), those unused longest first, as long as they have
  // been unused for kLandIdle (two sizes in turn keep their blocks) and until `cap` would fit.
  void ReclaimIdle(uint64_t cap);
  // mu_ held: whether block `b` is mapped, free (no buffer views it, not asked back yet) and unused for `idle`.
  static bool Unused(const Block& b, std::chrono::steady_clock::time_point now, std::chrono::milliseconds idle);
  // mu_ held: asks the peer for block `id` back (kMsgRevoke; Revoked() unmaps it); false when the socket refused.
  bool AskBack(uint32_t id);

  std::mutex mu_;
  int sock_;
  uint64_t budget_;
  FreeQueue* frees_;           // pushed under mu_ while !closed_ (the ring is unmapped after Close)
  uint64_t queued_frees_ = 0, socket_frees_ = 0;
  std::vector<Block> blocks_;  // index = id; ptr null once unmapped (ids are never reused)
  uint64_t bytes_ = 0;         // mapped
  bool closed_ = false;
};

// What an adopted block's ArrayBuffer finalizer needs.
struct LandRef {
  std::shared_ptr<Landing> landing;
  uint32_t id;
};

// The peer's landing blocks (it receives into them; we map and fill them). Owned by the channel
// (core.h); the watcher thread applies the peer's messages about them, the JS thread fills them, and
// both take the peer's free notices from the FreeQueue (so a block asked back may be given back, munmap
// and kMsgRevoked, on either thread).
class PeerBlocks {
 public:
  // `frees`: the FreeQueue in the header of the ring we produce (we fill the peer's blocks).
  PeerBlocks(int sock, FreeQueue* frees) : sock_(sock), frees_(frees) {}

  // JS thread: copies `length` bytes into a free block the peer offered (of a fitting size class)
  // and returns its id, or -1 when there is none (then the transfer goes through the ring). Takes the
  // peer's free notices first (TakeFrees).
  int64_t Land(const char* data, uint64_t length);

  // Watcher thread, after each second without a message: takes the peer's free notices, so a block the
  // peer asked back goes back even when we land nothing.
  void PollFrees();

  // Watcher thread: kMsgOffer, the peer offered block `id` of capacity `cap` in `fd` (borrowed): maps it as free.
  void Offered(uint32_t id, uint64_t cap, int fd);
  // Watcher thread: kMsgFree (the FreeQueue was full), the peer is done with block `id`: free again (or given
  // back, when asked for).
  void Freed(uint32_t id);
  // Watcher thread: kMsgRevoke, the peer asks for block `id` back.
  void Revoke(uint32_t id);

  // JS thread, once the channel's threads stopped: unmaps every block.
  void Close();

  uint64_t bytes();
  uint64_t free_blocks();
  uint64_t landed_sends() const { return landed_sends_; }

 private:
  // mu_ held (watcher or JS thread): unmaps the peer's block `id` (free, and asked back) and says so.
  void GiveBack(uint32_t id);
  // mu_ held: block `id` is free again (a free notice from the queue or the socket). A notice for a block
  // we do not hold or that is free already (only a broken peer sends one) is ignored.
  void ApplyFree(uint32_t id);
  // mu_ held: applies the free notices the peer pushed on the FreeQueue since the last call.
  void TakeFrees();

  struct Block {
    void* ptr;
    uint64_t cap;
    bool free;  // listed in free_
  };
  int sock_;
  FreeQueue* frees_;  // taken under mu_; null after Close (the ring is unmapped then)
  std::mutex mu_;  // JS thread (Land, held over its copy) and watcher thread (offers, frees, revokes)
  std::map<uint32_t, Block> blocks_;        // blocks the peer offered us, mapped
  std::multimap<uint64_t, uint32_t> free_;  // capacity -> id of those we may fill now
  std::set<uint32_t> revoke_pending_;       // blocks the peer asked back while not free here
  uint64_t landed_sends_ = 0;               // JS thread
};

}  // namespace shm
}  // namespace channels
}  // namespace tprpc
