// Landing blocks (landing.h): creating, offering, adopting and reclaiming ours (Landing), and
// mapping and filling the peer's (PeerBlocks). Threads: the receiver thread offers and reclaims,
// the watcher thread applies the peer's messages, the JS thread adopts, releases and fills;
// each class's mutex orders them.
#include "channels/shm/landing.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "thread_pool.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace tprpc {
namespace channels {
namespace shm {
namespace {

constexpr size_t kLandPerClass = 16;       // blocks of one size class per channel, at most (or kLandClassBytes)
constexpr uint64_t kLandClassBytes = 128ull << 20;
constexpr int kLandBurst = 4;              // blocks offered after one ring transfer of a landing size
// A free block unused this long may be taken back when a block of another size does not fit the budget.
constexpr std::chrono::milliseconds kLandIdle{2000};

// memcpy of a large buffer on the kernels' thread pool as well as the calling thread: one thread does
// not reach the memory bandwidth (a 40 MB copy: 2.6-2.9 ms on one thread, 2.3 ms on two). Up to one
// grain it stays on the calling thread: the hand-off is not worth it there (a 4 MB echo is no faster).
constexpr int64_t kCopyGrain = 8 << 20;
// A copy into a peer's block with non-temporal (streaming) stores, from StreamMin() bytes up. They
// do not read each destination line first (for a block the peer's core touched last, a fetch from
// that core's cache) and do not fill this core's cache with bytes only the peer will read; the peer
// then reads them from memory. bench/control/xcopy.c, 4 MB, two cores of this 2-vCPU VM: 109-131
// against 232-502 us to write in some runs, 105-146 against 81-87 us in others (the vCPUs' place on
// the host varies), the read 144-208 against 75-90 us. In the channel, where blocks rotate between
// other work, streaming won in every sitting: 4 MB rpcSync medians of interleaved runs 1.04 vs 1.21
// ms (8 pairs) and 0.78 vs 0.90 ms (5 pairs) quiet, 1.38 vs 1.44 ms beside 2 busy processes (8
// pairs), with 10-15% less CPU per call; 2 MB 0.51 vs 0.57 ms; 1 MB no difference; 500 KB slower
// (0.54 vs 0.50 ms), so smaller copies keep memcpy.
void StreamCopy(char* dst, const char* src, uint64_t n) {
#if defined(__x86_64__)
  uint64_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;  // NB: streaming stores want 16-byte alignment
  head = std::min(head, n);
  std::memcpy(dst, src, head);
  uint64_t i = head;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + i, src + i, n - i);
  _mm_sfence();  // NB: the streamed stores are ordered before the descriptor that names the block
#else
  std::memcpy(dst, src, n);
#endif
}

// Bytes from which a land copy streams (TPRPC_SHM_STREAM_BYTES, default 1 MiB; 0: never).
uint64_t StreamMin() {
  static const uint64_t min = [] {
    const char* v = std::getenv("TPRPC_SHM_STREAM_BYTES");
    if (v == nullptr || *v == '\0') return uint64_t{1} << 20;
    uint64_t b = std::strtoull(v, nullptr, 10);
    return b == 0 ? UINT64_MAX : b;
  }();
  return min;
}

void ParallelCopy(char* dst, const char* src, uint64_t n) {
  bool stream = n >= StreamMin();
  ParallelFor(static_cast<int64_t>(n), kCopyGrain, [&](int64_t b, int64_t e) {
    if (stream) StreamCopy(dst + b, src + b, e - b);
    else std::memcpy(dst + b, src + b, e - b);
  });
}

// How many blocks of capacity `cap` a channel may offer: kLandPerClass, or more small ones up to kLandClassBytes.
size_t ClassLimit(uint64_t cap) { return std::max<size_t>(kLandPerClass, kLandClassBytes / cap); }

}  // namespace

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

uint64_t LandClass(uint64_t n) {
  int k = 63 - __builtin_clzll(n - 1);  // 2^k < n <= 2^(k+1)
  uint64_t step = std::max<uint64_t>((uint64_t{1} << k) / 4, 4096);
  return (n + step - 1) / step * step;
}

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

// ---------------------------------------------------------------------------------------------
// Landing: our blocks.

void Landing::MaybeOffer(uint64_t n) {
  for (int i = 0; i < kLandBurst; i++)
    if (!OfferOne(n)) return;
}

bool Landing::OfferOne(uint64_t n) {
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

bool Landing::Adopt(Napi::Env* env, uint32_t id, uint64_t length, void** data, std::string* why) {
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

void Landing::Release(Napi::Env* env, uint32_t id) {
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
  // NB: the peer takes the notice on its next land(): no message, so no thread of the peer wakes for it
  uint64_t h = frees_->head.load(std::memory_order_relaxed);
  if (h - frees_->tail.load(std::memory_order_acquire) < kFreeSlots) {
    frees_->ids[h % kFreeSlots].store(id, std::memory_order_relaxed);
    frees_->head.store(h + 1, std::memory_order_release);
    ++queued_frees_;
    return;
  }
  SendLandMsg(sock_, {kMsgFree, id, blocks_[id].cap}, -1);
  ++socket_frees_;
}

uint64_t Landing::queued_frees() {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_frees_;
}

uint64_t Landing::socket_frees() {
  std::lock_guard<std::mutex> lock(mu_);
  return socket_frees_;
}

void Landing::ReleaseIdle(std::chrono::milliseconds idle) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  auto now = std::chrono::steady_clock::now();
  for (uint32_t i = 0; i < blocks_.size(); i++)
    if (Unused(blocks_[i], now, idle) && !AskBack(i)) return;
}

void Landing::Revoked(uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (id >= blocks_.size() || blocks_[id].ptr == nullptr || !blocks_[id].revoking || blocks_[id].adopted) return;
  munmap(blocks_[id].ptr, blocks_[id].cap);
  blocks_[id].ptr = nullptr;
  bytes_ -= blocks_[id].cap;
}

void Landing::Close() {
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

uint64_t Landing::bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

// What V8 is told about adopted blocks (mu_ held, JS thread). V8 adds every ArrayBuffer's length to
// the external memory that sets off its mark-compacts (64 MiB above the last one). A scavenge frees
// a dead young buffer (Node 20 runs the finalizer at the next setImmediate), but one that
// survived two (promoted) waits for a mark-compact. Counting every adopted block would cost a
// mark-compact every other 40 MB message, though the blocks are memory the channel holds anyway,
// within its budget. So:
//  1. while the block's class has free blocks or may still grow, the new buffer is hidden
//     (-length now, +length back when it is freed);
//  2. when this adoption leaves the class (which cannot grow) an eighth or less of its blocks free,
//     every hidden block is shown (+length each): V8 then sees the memory the channel needs back,
//     and collects.
void Landing::Account(Napi::Env env, uint32_t id) {
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

void Landing::ReclaimIdle(uint64_t cap) {
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

bool Landing::Unused(const Block& b, std::chrono::steady_clock::time_point now, std::chrono::milliseconds idle) {
  return b.ptr != nullptr && !b.adopted && !b.revoking && now - b.used >= idle;
}

bool Landing::AskBack(uint32_t id) {
  if (!SendLandMsg(sock_, {kMsgRevoke, id, blocks_[id].cap}, -1)) return false;
  blocks_[id].revoking = true;
  return true;
}

// ---------------------------------------------------------------------------------------------
// PeerBlocks: the peer's blocks.

int64_t PeerBlocks::Land(const char* data, uint64_t length) {
  if (length < kLandMin || length > kLandMax) return -1;
  // NB: mu_ stays held over the copy, so no notice (from a broken peer) can give the block back meanwhile
  std::lock_guard<std::mutex> lock(mu_);
  TakeFrees();
  auto it = free_.lower_bound(length);
  if (it == free_.end() || it->first > LandClass(length)) return -1;
  it = std::prev(free_.upper_bound(it->first));  // NB: the block freed last: most likely still in cache
  uint32_t id = it->second;
  free_.erase(it);
  Block& b = blocks_.find(id)->second;  // NB: free_ lists only blocks we hold (ApplyFree, Offered)
  b.free = false;
  ParallelCopy(static_cast<char*>(b.ptr), data, length);
  ++landed_sends_;
  return id;
}

void PeerBlocks::PollFrees() {
  std::lock_guard<std::mutex> lock(mu_);
  TakeFrees();
}

void PeerBlocks::Offered(uint32_t id, uint64_t cap, int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd < 0 || blocks_.count(id) != 0 || cap < kLandMin || cap > LandClass(kLandMax)) return;
  // NB: populated here, off the JS thread, so a copy into the block never faults
  void* p = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p != MAP_FAILED) {
    blocks_[id] = {p, cap, true};
    free_.emplace(cap, id);
  }
}

void PeerBlocks::Freed(uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  ApplyFree(id);
}

void PeerBlocks::ApplyFree(uint32_t id) {
  auto b = blocks_.find(id);
  if (b == blocks_.end() || b->second.free) return;
  if (revoke_pending_.erase(id) != 0) return GiveBack(id);
  b->second.free = true;
  free_.emplace(b->second.cap, id);
}

void PeerBlocks::TakeFrees() {
  if (frees_ == nullptr) return;
  uint64_t t = frees_->tail.load(std::memory_order_relaxed);
  uint64_t h = frees_->head.load(std::memory_order_acquire);
  if (h - t > kFreeSlots) {  // NB: not a count our peer can push: a broken peer; its notices are ignored
    frees_->tail.store(h, std::memory_order_release);
    return;
  }
  for (; t != h; t++) ApplyFree(frees_->ids[t % kFreeSlots].load(std::memory_order_relaxed));
  frees_->tail.store(t, std::memory_order_release);
}

void PeerBlocks::Revoke(uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  TakeFrees();  // NB: the peer asks back only blocks it freed; the notice may still be in the queue
  if (blocks_.count(id) == 0) return;
  // NB: a block we are filling, or named in a descriptor the peer has not taken yet, goes back after its free notice
  auto range = free_.equal_range(blocks_[id].cap);
  auto it = std::find_if(range.first, range.second, [&](const auto& kv) { return kv.second == id; });
  if (it != range.second) {
    free_.erase(it);
    GiveBack(id);
  } else {
    revoke_pending_.insert(id);
  }
}

void PeerBlocks::GiveBack(uint32_t id) {
  munmap(blocks_[id].ptr, blocks_[id].cap);
  blocks_.erase(id);
  SendLandMsg(sock_, {kMsgRevoked, id, 0}, -1);
}

void PeerBlocks::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  frees_ = nullptr;
  for (auto& kv : blocks_) munmap(kv.second.ptr, kv.second.cap);
  blocks_.clear();
  free_.clear();
  revoke_pending_.clear();
}

uint64_t PeerBlocks::bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  for (auto& kv : blocks_) n += kv.second.cap;
  return n;
}

uint64_t PeerBlocks::free_blocks() {
  std::lock_guard<std::mutex> lock(mu_);
  TakeFrees();
  return free_.size();
}

}  // namespace shm
}  // namespace channels
}  // namespace tprpc
