// The shm channel's data path: two single-producer/single-consumer byte rings
// in shared memory (one per direction) between two processes on one host.
//
// Nothing is named in /dev/shm: each ring is a memfd handed to the peer over an
// abstract unix socket (SCM_RIGHTS) and closed right after mapping, so a ring
// dies with the last process that maps it, whatever way that process ends. The
// socket stays open to carry landing offers and to notice the peer's death (EOF).
//
// Connection (both sides, on a libuv worker thread):
//  1. The listener binds "\0tprpc-shm-<pid>-<random>" (shmListen, JS thread) and
//     sends that name to the peer over the pipe's control connection.
//  2. The peer connects (shmConnect); the listener accepts one connection and
//     closes its listening socket.
//  3. Each side creates its outgoing ring (memfd, mapped pre-faulted), sends
//     Hello{magic, version, pid, ring bytes} with the memfd attached, reads the
//     peer's Hello and memfd, maps it as its incoming ring and closes both fds.
//  4. Each side checks SO_PEERCRED: the socket's peer must be the pid the
//     (authenticated) control connection announced, so no other local process
//     can slip into the channel.
//
// Transfer (send(id, bytes) / recv(id, dest), any order of calls):
//  1. The sender thread writes records [id u64][length u64][bytes] into the
//     outgoing ring in send() order, in chunks, publishing `head` after each, so
//     the receiver copies out while the sender still copies in.
//  2. The receiver thread reads the next record header, waits until JS posted a
//     recv() for that id (the control message naming it may still be on its
//     way), and copies the bytes into the posted buffer.
//  3. Sleeping sides wait on futexes in the ring header; the other side wakes
//     them only when their `waiting` flag is set (no syscall on the fast path).
//  4. Peer death: the watcher thread sees EOF on the socket and sets peer_gone;
//     a sender fails at once, a receiver after draining what the peer wrote.
//     (The socket otherwise carries only the landing messages below.)
//
// Landing (one copy instead of two, for transfers of kLandMin..kLandMax bytes):
//  1. After a ring transfer of such a size, the receiver's receiver thread creates up to kLandBurst
//     blocks of its size class (memfd, mapped populated) and sends each to the peer over the socket
//     (kMsgOffer + SCM_RIGHTS); the peer's watcher thread maps it (populated) as free.
//  2. The sender's land() (JS thread) copies the bytes into a free block of the class at once and
//     names the block in the transfer's descriptor (sdk/channel/shm/tagged_channel.ts); no ring,
//     no thread hand-off.
//  3. The receiver's adopt() makes the block the received ArrayBuffer itself; when V8 frees that
//     buffer, the finalizer sends kMsgFree and the peer may fill the block again. takeLanded()
//     copies a block out instead (a receiver with its own destination) and frees it at once.
//  4. Blocks stay within TPRPC_SHM_LANDING_BYTES (default 256 MiB) per channel and direction and
//     ClassLimit() per class; without a free block the transfer goes through the ring. They are
//     unmapped when the channel closes, or (adopted ones) when their buffer is freed after that.
//  5. When a block of a new size does not fit the budget, the receiver asks for free blocks of other
//     sizes unused for kLandIdle back (kMsgRevoke); the sender unmaps each once it is free on its side
//     (at once, or after the kMsgFree of a transfer in flight) and answers kMsgRevoked, and the
//     receiver unmaps it too. The next ring transfer of the new size then finds room for its blocks.
//     Blocks unused for TPRPC_SHM_LANDING_IDLE_S (default 30 s) are asked back the same way, so a
//     quiet channel returns the memory a burst of transfers made.
//  NB: the peer has our free blocks mapped writable; it is the authenticated, same-uid process
//  of the handshake, and it writes a block only between our offer and its descriptor.
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
#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <map>
#include <set>
#include <unordered_map>
#include <vector>

#include "channels/common.h"
#include "channels/shared.h"
#include "thread_pool.h"

namespace tprpc {
namespace channels {
namespace {

constexpr uint64_t kMagic = 0x31474e4952707274ull;  // "tprRING1"
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 4096;
constexpr uint64_t kChunk = 1 << 20;   // publish granularity: the receiver starts copying after 1 MiB
constexpr int kWaitMs = 20;            // futex timeout: how often a sleeping thread rechecks close/peer death
constexpr uint64_t kDefaultRing = 8ull << 20;  // NB: small enough to stay in L3, so the reader copies out of cache (400 MB: ~110 ms vs ~150 with 64 MiB)

struct RingHeader {
  alignas(64) std::atomic<uint64_t> head;  // bytes written in total (producer)
  std::atomic<uint32_t> data_seq;          // futex: bumped by the producer after publishing
  std::atomic<uint32_t> consumer_waiting;
  alignas(64) std::atomic<uint64_t> tail;  // bytes consumed in total (consumer)
  std::atomic<uint32_t> space_seq;         // futex: bumped by the consumer after consuming
  std::atomic<uint32_t> producer_waiting;
  alignas(64) uint64_t magic;
  uint64_t capacity;
};
static_assert(sizeof(RingHeader) <= kHeaderBytes, "ring header fits its page");

struct Ring {
  void* base = nullptr;
  size_t mapped = 0;
  RingHeader* h = nullptr;
  char* data = nullptr;
  uint64_t cap = 0;

  void Unmap() {
    if (base != nullptr) munmap(base, mapped);
    base = nullptr;
  }
};

struct Hello {
  uint64_t magic;
  uint32_t version;
  uint32_t pid;
  uint64_t ring_bytes;
};

uint64_t RingBytesFromEnv() {
  const char* v = std::getenv("TPRPC_SHM_RING_BYTES");
  uint64_t n = kDefaultRing;
  if (v != nullptr && *v != '\0') n = std::strtoull(v, nullptr, 10);
  n = std::max<uint64_t>(n, 1 << 16);
  uint64_t p = 1;
  while (p < n) p <<= 1;  // power of two: positions wrap with a mask
  return p;
}

// Maps a ring of `cap` data bytes from `fd`; initializes the header when `init`.
bool MapRing(int fd, uint64_t cap, bool init, Ring* r, std::string* why) {
  size_t bytes = kHeaderBytes + cap;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    *why = "could not map a shm ring of " + std::to_string(bytes) + " bytes";
    return false;
  }
  r->base = p;
  r->mapped = bytes;
  r->h = static_cast<RingHeader*>(p);
  r->data = static_cast<char*>(p) + kHeaderBytes;
  r->cap = cap;
  if (init) {
    new (r->h) RingHeader();
    r->h->head.store(0);
    r->h->tail.store(0);
    r->h->data_seq.store(0);
    r->h->space_seq.store(0);
    r->h->consumer_waiting.store(0);
    r->h->producer_waiting.store(0);
    r->h->magic = kMagic;
    r->h->capacity = cap;
  } else if (r->h->magic != kMagic || r->h->capacity != cap) {
    *why = "the peer's shm ring has a foreign header (a different tprpc version?)";
    r->Unmap();
    return false;
  }
  return true;
}


// ---------------------------------------------------------------------------------------------
// Landing blocks: receive buffers in shared memory that the peer writes straight into (one copy
// per transfer instead of two through the ring). See "Landing" in the file comment.

constexpr uint64_t kLandMin = 64 << 10;   // smaller transfers go through the ring
constexpr uint64_t kLandMax = 64ull << 20; // larger ones too (their copy runs off the JS thread there)
constexpr size_t kLandPerClass = 16;       // blocks of one size class per channel, at most (or kLandClassBytes)
constexpr uint64_t kLandClassBytes = 128ull << 20;
constexpr int kLandBurst = 4;              // blocks offered after one ring transfer of a landing size
constexpr uint32_t kMsgOffer = 1, kMsgFree = 2, kMsgShare = 3, kMsgRevoke = 4, kMsgRevoked = 5;
// A free block unused this long may be taken back when a block of another size does not fit the budget.
constexpr std::chrono::milliseconds kLandIdle{2000};

// Socket message after the handshake (both directions): kMsgOffer carries the block's memfd;
// kMsgShare carries a shared storage's memfd, `id` is the transfer and `cap` its offset in the file;
// kMsgRevoke (owner -> filler) asks for block `id` back, kMsgRevoked (filler -> owner) says the filler
// unmapped it and will not name it again.
struct LandMsg {
  uint32_t type;
  uint32_t id;
  uint64_t cap;
};

// How long a landing block may go unused before the receiver asks for it back even when no other size
// needs the room (TPRPC_SHM_LANDING_IDLE_S, default 30 s), so that memory a burst of transfers made
// is returned.
std::chrono::milliseconds LandIdleFromEnv() {
  const char* v = std::getenv("TPRPC_SHM_LANDING_IDLE_S");
  double secs = v != nullptr && *v != '\0' ? std::strtod(v, nullptr) : 30.0;
  return std::chrono::milliseconds(static_cast<int64_t>((secs > 0 ? secs : 30.0) * 1000));
}

uint64_t LandBudgetFromEnv() {
  const char* v = std::getenv("TPRPC_SHM_LANDING_BYTES");
  if (v != nullptr && *v != '\0') return std::strtoull(v, nullptr, 10);
  return 256ull << 20;
}

// The block size for a transfer of n bytes: 4 classes per power of two (<= 25% slack), whole pages.
uint64_t LandClass(uint64_t n) {
  int k = 63 - __builtin_clzll(n - 1);  // 2^k < n <= 2^(k+1)
  uint64_t step = std::max<uint64_t>((uint64_t{1} << k) / 4, 4096);
  return (n + step - 1) / step * step;
}

// memcpy of a large buffer on the kernels' thread pool as well as the calling thread: one thread does
// not reach the memory bandwidth (measured here at 40 MB: 2.6-2.9 ms alone, 2.3 ms on two threads;
// the channel-level 40 MB echo 12.6-12.9 -> 12.0 ms). Up to one grain it stays on the calling thread:
// the hand-off is not worth it there (a 4 MB echo was no faster).
constexpr int64_t kCopyGrain = 8 << 20;
void ParallelCopy(char* dst, const char* src, uint64_t n) {
  ParallelFor(static_cast<int64_t>(n), kCopyGrain, [&](int64_t b, int64_t e) { std::memcpy(dst + b, src + b, e - b); });
}

// How many blocks of capacity `cap` a channel may offer: kLandPerClass, or more small ones up to kLandClassBytes.
size_t ClassLimit(uint64_t cap) { return std::max<size_t>(kLandPerClass, kLandClassBytes / cap); }

bool SendLandMsg(int sock, const LandMsg& m, int fd) {
  struct iovec iov = {const_cast<LandMsg*>(&m), sizeof m};
  char ctrl[CMSG_SPACE(sizeof(int))] = {};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    msg.msg_control = ctrl;
    msg.msg_controllen = sizeof ctrl;
    struct cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  }
  for (;;) {
    ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(sizeof m)) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;  // NB: the peer is gone (the watcher reports it) or not reading (the block just goes unused)
  }
}

// Our landing blocks (we receive into them; the peer maps and fills them). Shared by the channel and
// by every ArrayBuffer handed out over a block (its finalizer), so it outlives a closed channel.
// States: offered (the peer may fill it; it names the block in a descriptor) -> adopted (a JS
// ArrayBuffer views it) -> offered again once that buffer is collected (kMsgFree tells the peer).
class Landing {
 public:
  Landing(int sock, uint64_t budget) : sock_(sock), budget_(budget) {}

  // Receiver thread, after a ring transfer of n bytes: offers the peer up to kLandBurst more blocks of
  // its class while the class has fewer than kLandPerClass blocks and the budget allows.
  void MaybeOffer(uint64_t n) {
    for (int i = 0; i < kLandBurst; i++)
      if (!OfferOne(n)) return;
  }

 private:
  bool OfferOne(uint64_t n) {
    if (n < kLandMin || n > kLandMax) return false;
    uint64_t cap = LandClass(n);
    uint32_t id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return false;
      size_t same = 0;
      for (auto& b : blocks_) same += (b.ptr != nullptr && b.cap == cap);
      if (same >= ClassLimit(cap)) return false;
      if (bytes_ + cap > budget_) {
        ReclaimIdle(cap);  // NB: the blocks come back later (Revoked); a later transfer of this size offers again
        return false;
      }
      id = static_cast<uint32_t>(blocks_.size());
      blocks_.push_back({nullptr, cap, false, false, 0, false, std::chrono::steady_clock::now()});
      bytes_ += cap;
    }
    int fd = memfd_create("tprpc-shm-landing", MFD_CLOEXEC);
    void* p = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, static_cast<off_t>(cap)) == 0)
      p = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);  // NB: the pages exist before the peer's first copy
    std::lock_guard<std::mutex> lock(mu_);
    bool ok = false;
    if (p == MAP_FAILED || closed_) {
      if (p != MAP_FAILED) munmap(p, cap);
      bytes_ -= cap;
    } else {
      blocks_[id].ptr = p;
      // NB: offered before the peer knows it; the peer can use it only after reading this message.
      ok = SendLandMsg(sock_, {kMsgOffer, id, cap}, fd);
      if (!ok) {
        munmap(p, cap);
        blocks_[id].ptr = nullptr;
        bytes_ -= cap;
      }
    }
    if (fd >= 0) close(fd);  // NB: both mappings keep the memory; no descriptor outlives this call
    return ok;
  }

 public:

  // JS thread: the block the peer filled, for a buffer of `length` bytes; false (and *why) when the
  // descriptor names no offered block of at least that size (a broken or hostile peer).
  // With `env` (the block becomes an ArrayBuffer), also settles what V8 is told; see Account().
  bool Adopt(Napi::Env* env, uint32_t id, uint64_t length, void** data, std::string* why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (id >= blocks_.size() || blocks_[id].ptr == nullptr || blocks_[id].adopted || blocks_[id].cap < length) {
      *why = "shm channel: the peer named landing block " + std::to_string(id) + " for " + std::to_string(length) +
             " bytes, which it was not offered";
      return false;
    }
    blocks_[id].adopted = true;
    blocks_[id].used = std::chrono::steady_clock::now();
    blocks_[id].length = length;
    *data = blocks_[id].ptr;
    if (env != nullptr) Account(*env, id);
    return true;
  }

  // JS thread: the block is free again (its buffer was collected, or copied out): offer it again,
  // or unmap it once the channel closed.
  void Release(Napi::Env* env, uint32_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    if (id >= blocks_.size() || blocks_[id].ptr == nullptr) return;
    blocks_[id].adopted = false;
    if (blocks_[id].hidden && env != nullptr)  // NB: V8 subtracted the length when it freed the buffer
      Napi::MemoryManagement::AdjustExternalMemory(*env, static_cast<int64_t>(blocks_[id].length));
    blocks_[id].hidden = false;
    if (closed_) {
      munmap(blocks_[id].ptr, blocks_[id].cap);
      blocks_[id].ptr = nullptr;
      bytes_ -= blocks_[id].cap;
      return;
    }
    SendLandMsg(sock_, {kMsgFree, id, blocks_[id].cap}, -1);
  }

  // Watcher thread, after each second without a message on the socket: asks for every free block unused
  // for `idle` back (kMsgRevoke; Revoked() unmaps it).
  void ReleaseIdle(std::chrono::milliseconds idle) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    auto now = std::chrono::steady_clock::now();
    for (uint32_t i = 0; i < blocks_.size(); i++)
      if (Unused(blocks_[i], now, idle) && !AskBack(i)) return;
  }

  // Watcher thread: the peer gave block `id` back (kMsgRevoke answered): unmaps it, which frees budget
  // for other sizes. A block a buffer still views (a broken peer) stays.
  void Revoked(uint32_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    if (id >= blocks_.size() || blocks_[id].ptr == nullptr || !blocks_[id].revoking || blocks_[id].adopted) return;
    munmap(blocks_[id].ptr, blocks_[id].cap);
    blocks_[id].ptr = nullptr;
    bytes_ -= blocks_[id].cap;
  }

  // JS thread, when the channel closes (before its socket is closed): unmaps every block no buffer views.
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    for (auto& b : blocks_) {
      if (b.ptr != nullptr && !b.adopted) {
        munmap(b.ptr, b.cap);
        b.ptr = nullptr;
        bytes_ -= b.cap;
      }
    }
  }

  uint64_t bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_;
  }

 private:
  // What V8 is told about adopted blocks (mu_ held, JS thread). V8 adds every ArrayBuffer's length to
  // the external memory that sets off its mark-compacts (64 MiB above the last one). A scavenge frees
  // a dead young buffer (measured: Node 20 runs the finalizer at the next setImmediate), but one that
  // survived two (promoted) waits for a mark-compact. Counting every adopted block would cost a
  // mark-compact every other 40 MB message, though the blocks are memory the channel holds anyway,
  // within its budget. So:
  //  1. while the block's class has free blocks or may still grow, the new buffer is hidden
  //     (-length now, +length back when it is freed);
  //  2. when this adoption leaves the class (which cannot grow) an eighth or less of its blocks free,
  //     every hidden block is shown (+length each): V8 then sees the memory the channel needs back,
  //     and collects.
  void Account(Napi::Env env, uint32_t id) {
    uint64_t cap = blocks_[id].cap;
    size_t same = 0, free = 0;
    for (auto& b : blocks_) {
      if (b.ptr == nullptr || b.cap != cap) continue;
      ++same;
      free += !b.adopted;
    }
    // NB: shown a little before the last free block goes, so the collection can finish (and free
    // blocks) before the peer runs out and falls back to the ring
    bool exhausted = free <= same / 8 && (same >= ClassLimit(cap) || bytes_ + cap > budget_);
    if (!exhausted) {
      blocks_[id].hidden = true;
      Napi::MemoryManagement::AdjustExternalMemory(env, -static_cast<int64_t>(blocks_[id].length));
      return;
    }
    int64_t shown = 0;
    for (auto& b : blocks_) {
      if (b.ptr != nullptr && b.adopted && b.hidden) {
        b.hidden = false;
        shown += static_cast<int64_t>(b.length);
      }
    }
    if (shown != 0) Napi::MemoryManagement::AdjustExternalMemory(env, shown);
  }

  // Receiver thread, mu_ held, when a block of capacity `cap` does not fit the budget: asks the peer
  // for free blocks of other sizes back (kMsgRevoke), those unused longest first, as long as they have
  // been unused for kLandIdle (two sizes in turn keep their blocks) and until `cap` would fit.
  void ReclaimIdle(uint64_t cap) {
    auto now = std::chrono::steady_clock::now();
    uint64_t coming = 0;
    std::vector<uint32_t> idle;
    for (uint32_t i = 0; i < blocks_.size(); i++) {
      const Block& b = blocks_[i];
      if (b.ptr != nullptr && b.revoking) coming += b.cap;
      else if (b.cap != cap && Unused(b, now, kLandIdle)) idle.push_back(i);
    }
    std::sort(idle.begin(), idle.end(), [&](uint32_t a, uint32_t b) { return blocks_[a].used < blocks_[b].used; });
    for (uint32_t i : idle) {
      if (bytes_ - coming + cap <= budget_ || !AskBack(i)) return;
      coming += blocks_[i].cap;
    }
  }

  struct Block {
    void* ptr;
    uint64_t cap;
    bool adopted;
    bool hidden;      // adopted, and its length taken off V8's external memory (Account)
    uint64_t length;  // of the adopted buffer
    bool revoking;    // asked back (kMsgRevoke); unmapped once the peer says kMsgRevoked
    std::chrono::steady_clock::time_point used;  // offered or last adopted
  };

  // mu_ held: whether block `b` is mapped, free (no buffer views it, not asked back yet) and unused for `idle`.
  static bool Unused(const Block& b, std::chrono::steady_clock::time_point now, std::chrono::milliseconds idle) {
    return b.ptr != nullptr && !b.adopted && !b.revoking && now - b.used >= idle;
  }

  // mu_ held: asks the peer for block `id` back (kMsgRevoke; Revoked() unmaps it); false when the socket refused.
  bool AskBack(uint32_t id) {
    if (!SendLandMsg(sock_, {kMsgRevoke, id, blocks_[id].cap}, -1)) return false;
    blocks_[id].revoking = true;
    return true;
  }
  std::mutex mu_;
  int sock_;
  uint64_t budget_;
  std::vector<Block> blocks_;  // index = id; ptr null once unmapped (ids are never reused)
  uint64_t bytes_ = 0;         // mapped
  bool closed_ = false;
};

// What an adopted block's ArrayBuffer finalizer needs.
struct LandRef {
  std::shared_ptr<Landing> landing;
  uint32_t id;
};

// Everything a connected channel needs; filled on a worker thread by the handshake.
struct Connected {
  int sock = -1;
  int peer_pid = 0;
  Ring out, in;
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

int64_t DeadlineMs(double timeout_ms) {
  if (!(timeout_ms > 0)) return -1;
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
             .count() +
         static_cast<int64_t>(timeout_ms);
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

// ---------------------------------------------------------------------------------------------
// A connected channel: rings, threads and queues. Shared by the JS object and its threads.

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

class ShmCore {
 public:
  ShmCore(const Connected& c, Completer* done)
      : c_(c), done_(done), landing_(std::make_shared<Landing>(c.sock, LandBudgetFromEnv())) {}

  void Start() {
    wake_fd_ = eventfd(0, EFD_CLOEXEC);
    sender_ = std::thread([this] { SendLoop(); });
    receiver_ = std::thread([this] { RecvLoop(); });
    watcher_ = std::thread([this] { Watch(); });
  }

  // JS thread. False (and *why) when the channel can no longer take the call.
  bool PostSend(const SendJob& j, Outcome* why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Usable(why)) return false;
    if (peer_gone_.load() || PeerHungUp()) return *why = PeerGone(), false;
    sends_.push_back(j);
    cv_.notify_all();
    return true;
  }

  bool PostRecv(uint64_t id, const RecvJob& j, Outcome* why) {
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

  // JS thread, idempotent: stops the threads, rejects what is still queued, unmaps the rings.
  void Close(Napi::Env env) {
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
    for (auto& kv : peer_blocks_) munmap(kv.second.ptr, kv.second.cap);
    peer_blocks_.clear();
    for (auto& kv : shares_in_) close(kv.second.first);
    shares_in_.clear();
    peer_free_.clear();
    revoke_pending_.clear();
    close(wake_fd_);
    c_.out.Unmap();
    c_.in.Unmap();
  }

  // JS thread: copies `length` bytes into a free block the peer offered (of a fitting size class)
  // and returns its id, or -1 when there is none (then the transfer goes through the ring).
  int64_t Land(const char* data, uint64_t length) {
    if (length < kLandMin || length > kLandMax || closing_.load() || peer_gone_.load()) return -1;
    uint32_t id;
    void* dst;
    {
      std::lock_guard<std::mutex> lock(peer_mu_);
      auto it = peer_free_.lower_bound(length);
      if (it == peer_free_.end() || it->first > LandClass(length)) return -1;
      it = std::prev(peer_free_.upper_bound(it->first));  // NB: the block freed last: most likely still in cache
      id = it->second;
      peer_free_.erase(it);
      dst = peer_blocks_[id].ptr;
    }
    ParallelCopy(static_cast<char*>(dst), data, length);
    ++landed_sends_;
    return id;
  }

  // JS thread: hands the peer the shared storage that holds these bytes (see "Shared storages");
  // returns the transfer's id, or -1 when they are not in one (then they are copied as usual).
  int64_t Share(const char* data, uint64_t length) {
    if (length < kLandMin || closing_.load() || peer_gone_.load()) return -1;
    int fd = -1;
    uint64_t offset = 0;
    if (!SharedSpanOf(data, length, &fd, &offset)) return -1;
    uint32_t id = next_share_;
    if (!SendLandMsg(c_.sock, {kMsgShare, id, offset}, fd)) return -1;
    ++next_share_;
    return id;
  }

  // JS thread: the file and offset of shared transfer `id` (its kMsgShare went out before the
  // descriptor, so it is on its way to the watcher); false and *why when the peer is gone first.
  bool TakeShare(uint32_t id, int* fd, uint64_t* offset, std::string* why) {
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

  std::shared_ptr<Landing> landing() const { return landing_; }
  uint64_t shared_sends() const { return next_share_; }
  uint64_t landed_sends() const { return landed_sends_; }
  uint64_t peer_block_bytes() {
    std::lock_guard<std::mutex> lock(peer_mu_);
    uint64_t n = 0;
    for (auto& kv : peer_blocks_) n += kv.second.cap;
    return n;
  }
  uint64_t peer_free_blocks() {
    std::lock_guard<std::mutex> lock(peer_mu_);
    return peer_free_.size();
  }

  int peer_pid() const { return c_.peer_pid; }
  uint64_t ring_bytes() const { return c_.out.cap; }
  Completer* completer() const { return done_; }

 private:
  bool Usable(Outcome* why) {
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

  // JS thread: the socket shows the peer's end now (the watcher thread may not have run yet).
  bool PeerHungUp() {
    struct pollfd p = {c_.sock, POLLRDHUP, 0};  // NB: not POLLIN: the peer's landing messages are readable data
    if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) peer_gone_.store(true);
    return peer_gone_.load();
  }

  Outcome PeerGone() const {
    return Outcome::Fail("ECONNRESET", ECONNRESET,
                         "shm channel: peer process " + std::to_string(c_.peer_pid) +
                             " closed the channel (exited or crashed) during a transfer");
  }

  void WakeAll() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    }
    {
      std::lock_guard<std::mutex> lock(share_mu_);
      share_cv_.notify_all();
    }
    c_.out.h->space_seq.fetch_add(1);
    FutexWake(&c_.out.h->space_seq, 1 << 30);
    c_.in.h->data_seq.fetch_add(1);
    FutexWake(&c_.in.h->data_seq, 1 << 30);
  }

  // Producer side: copies n bytes into the outgoing ring, publishing every kChunk.
  bool Write(const char* src, uint64_t n, Outcome* o) {
    Ring& r = c_.out;
    RingHeader* h = r.h;
    uint64_t head = h->head.load(std::memory_order_relaxed);
    while (n > 0) {
      uint64_t tail = h->tail.load(std::memory_order_acquire);
      uint64_t free = r.cap - (head - tail);
      if (free == 0) {
        if (closing_.load()) return *o = Outcome::Fail("ECHANNELCLOSED", 0, "shm channel: closed during a send"), false;
        if (peer_gone_.load()) return *o = PeerGone(), false;
        h->producer_waiting.store(1);
        uint32_t seq = h->space_seq.load();
        if (r.cap - (head - h->tail.load()) == 0) FutexWait(&h->space_seq, seq, kWaitMs);
        h->producer_waiting.store(0);
        continue;
      }
      uint64_t chunk = std::min({n, free, kChunk});
      uint64_t pos = head & (r.cap - 1);
      uint64_t first = std::min(chunk, r.cap - pos);
      std::memcpy(r.data + pos, src, first);
      if (chunk > first) std::memcpy(r.data, src + first, chunk - first);
      head += chunk;
      src += chunk;
      n -= chunk;
      h->head.store(head, std::memory_order_release);
      h->data_seq.fetch_add(1);
      if (h->consumer_waiting.load()) FutexWake(&h->data_seq, 1);
    }
    return true;
  }

  // Consumer side: copies n bytes out of the incoming ring (dst may be null: discard).
  bool Read(char* dst, uint64_t n, Outcome* o) {
    Ring& r = c_.in;
    RingHeader* h = r.h;
    uint64_t tail = h->tail.load(std::memory_order_relaxed);
    while (n > 0) {
      bool gone = peer_gone_.load(std::memory_order_acquire);  // NB: before head: the peer's last bytes count
      uint64_t head = h->head.load(std::memory_order_acquire);
      uint64_t avail = head - tail;
      if (avail == 0) {
        if (closing_.load()) return *o = Outcome::Fail("ECHANNELCLOSED", 0, "shm channel: closed during a recv"), false;
        if (gone) return *o = PeerGone(), false;
        h->consumer_waiting.store(1);
        uint32_t seq = h->data_seq.load();
        if (h->head.load() == tail) FutexWait(&h->data_seq, seq, kWaitMs);
        h->consumer_waiting.store(0);
        continue;
      }
      uint64_t chunk = std::min({n, avail, kChunk});
      uint64_t pos = tail & (r.cap - 1);
      uint64_t first = std::min(chunk, r.cap - pos);
      if (dst != nullptr) {
        std::memcpy(dst, r.data + pos, first);
        if (chunk > first) std::memcpy(dst + first, r.data, chunk - first);
        dst += chunk;
      }
      tail += chunk;
      n -= chunk;
      h->tail.store(tail, std::memory_order_release);
      h->space_seq.fetch_add(1);
      if (h->producer_waiting.load()) FutexWake(&h->space_seq, 1);
    }
    return true;
  }

  // Sender thread.
  void SendLoop() {
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

  // Receiver thread.
  void RecvLoop() {
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

  // A thread hit a fatal error: every queued and future call fails with it.
  void Break(const Outcome& o) {
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
  // frees; end of file (or an error) on the socket is the peer's end.
  bool TakeLandMsg() {
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
    std::lock_guard<std::mutex> lock(peer_mu_);
    if (m.type == kMsgOffer && fd >= 0 && peer_blocks_.count(m.id) == 0 && m.cap >= kLandMin && m.cap <= LandClass(kLandMax)) {
      // NB: populated here, off the JS thread, so a copy into the block never faults
      void* p = mmap(nullptr, m.cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
      if (p != MAP_FAILED) {
        peer_blocks_[m.id] = {p, m.cap};
        peer_free_.emplace(m.cap, m.id);
      }
    } else if (m.type == kMsgFree && peer_blocks_.count(m.id) != 0) {
      if (revoke_pending_.erase(m.id) != 0) GiveBack(m.id);
      else peer_free_.emplace(peer_blocks_[m.id].cap, m.id);
    } else if (m.type == kMsgRevoke && peer_blocks_.count(m.id) != 0) {
      // NB: a block we are filling, or named in a descriptor the peer has not taken yet, goes back after its kMsgFree
      auto range = peer_free_.equal_range(peer_blocks_[m.id].cap);
      auto it = std::find_if(range.first, range.second, [&](const auto& kv) { return kv.second == m.id; });
      if (it != range.second) {
        peer_free_.erase(it);
        GiveBack(m.id);
      } else {
        revoke_pending_.insert(m.id);
      }
    }
    if (fd >= 0) close(fd);
    return true;
  }

  // Watcher thread, peer_mu_ held: unmaps the peer's block `id` (free, and asked back) and says so.
  void GiveBack(uint32_t id) {
    munmap(peer_blocks_[id].ptr, peer_blocks_[id].cap);
    peer_blocks_.erase(id);
    SendLandMsg(c_.sock, {kMsgRevoked, id, 0}, -1);
  }

  void Watch() {
    struct pollfd p[2] = {{c_.sock, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const auto idle = LandIdleFromEnv();
    for (;;) {
      int n = poll(p, 2, 1000);
      if (n < 0 && errno == EINTR) continue;
      if (closing_.load() || (p[1].revents & POLLIN)) return;
      if (n == 0) {
        landing_->ReleaseIdle(idle);  // NB: after each second without a message on the socket
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
  struct PeerBlock {
    void* ptr;
    uint64_t cap;
  };
  std::mutex peer_mu_;  // JS thread (Land) and watcher thread (offers, frees)
  std::map<uint32_t, PeerBlock> peer_blocks_;   // blocks the peer offered us, mapped
  std::multimap<uint64_t, uint32_t> peer_free_;  // capacity -> id of those we may fill now
  std::set<uint32_t> revoke_pending_;            // blocks the peer asked back while not free here
  uint64_t landed_sends_ = 0;  // JS thread
  uint32_t next_share_ = 0;    // JS thread: id of our next shared transfer
  std::mutex share_mu_;        // JS thread (TakeShare) and watcher thread (kMsgShare)
  std::condition_variable share_cv_;
  std::map<uint32_t, std::pair<int, uint64_t>> shares_in_;  // the peer's shared transfers not yet taken: fd, offset
};

// ---------------------------------------------------------------------------------------------
// JS objects.

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

  // landingStats() -> { offeredBytes, peerBytes, landedSends } (tests, debugging).
  Napi::Value LandingStats(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    o.Set("offeredBytes", Napi::Number::New(env, core_ ? static_cast<double>(core_->landing()->bytes()) : 0));
    o.Set("peerBytes", Napi::Number::New(env, core_ && !closed_ ? static_cast<double>(core_->peer_block_bytes()) : 0));
    o.Set("landedSends", Napi::Number::New(env, core_ ? static_cast<double>(core_->landed_sends()) : 0));
    o.Set("sharedSends", Napi::Number::New(env, core_ ? static_cast<double>(core_->shared_sends()) : 0));
    o.Set("peerFreeBlocks", Napi::Number::New(env, core_ && !closed_ ? static_cast<double>(core_->peer_free_blocks()) : 0));
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
    int sock = -1;
    if (listen_fd_ >= 0) {
      if (WaitFd(listen_fd_, POLLIN, deadline_, &outcome_, "waiting for the peer to connect")) {
        sock = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (sock < 0) outcome_ = Outcome::Fail("ECONNABORTED", errno, "shm channel: accept failed (listener closed?)");
      }
      close(listen_fd_);
    } else {
      sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      struct sockaddr_un addr;
      socklen_t len = AbstractAddress(name_, &addr);
      if (sock < 0 || connect(sock, reinterpret_cast<struct sockaddr*>(&addr), len) != 0) {
        outcome_ = Outcome::Fail("ECONNREFUSED", errno,
                                 "shm channel: could not reach the peer's socket @" + name_ +
                                     " (is it on this host and in this network namespace?)");
        if (sock >= 0) close(sock);
        sock = -1;
      }
    }
    if (sock >= 0) outcome_ = Handshake(sock, expected_pid_, deadline_, &connected_);
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
  std::string name = RandomName();
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un addr;
  socklen_t len = AbstractAddress(name, &addr);
  if (fd < 0 || bind(fd, reinterpret_cast<struct sockaddr*>(&addr), len) != 0 || listen(fd, 1) != 0) {
    int err = errno;
    if (fd >= 0) close(fd);
    throw ToJsError(env, Outcome::Fail("ESHM", err, "shm channel: could not listen on an abstract unix socket"));
  }
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

void RegisterShm(Napi::Env env, Napi::Object ns) {
  ShmChannel::Define(env);
  ns.Set("shmListen", Napi::Function::New(env, ShmListen));
  ns.Set("shmConnect", Napi::Function::New(env, ShmConnect));
  ns.Set("shmRingBytes", Napi::Number::New(env, static_cast<double>(RingBytesFromEnv())));
  RegisterShared(env, ns);
}

}  // namespace channels
}  // namespace tprpc
