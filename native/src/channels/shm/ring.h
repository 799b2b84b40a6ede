// The shm channel's data path: a single-producer/single-consumer byte ring in shared memory.
// Each direction of a channel has one: the sender thread of one process writes records
// [id u64][length u64][bytes] into it, the receiver thread of the other reads them out
// (core.cc). The ring lives in a memfd that the handshake (handshake.cc) maps in both processes.
//
// Transfer:
//  1. The producer copies in chunks, publishing `head` after each, so the consumer copies out
//     while the producer still copies in.
//  2. A side with nothing to do (a full ring, an empty one) sleeps on a futex in the ring header;
//     the other side wakes it only when its `waiting` flag is set (no syscall on the fast path).
//  3. Sleeping sides recheck every kWaitMs whether the channel closed or the peer is gone.
//
// Threads: Write() runs on the channel's sender thread, Read() on its receiver thread, Wake*()
// on any thread (close, the watcher); MapRing() on the handshake's libuv worker thread.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace tprpc {
namespace channels {
namespace shm {

constexpr uint64_t kMagic = 0x31474e4952707274ull;  // "tprRING1"
constexpr size_t kHeaderBytes = 4096;
constexpr uint32_t kFreeSlots = 256;

// Free notices for landing blocks (landing.h), in the header of the ring whose consumer owns the
// blocks: the owner (its JS thread, when a block's buffer is collected) pushes the block's id, the
// filler (the ring's producer) takes them when it next looks for a block. Single producer, single
// consumer; no wake-up: the filler needs the block only when it next sends. When the queue is full
// the owner says kMsgFree on the socket instead.
struct FreeQueue {
  alignas(64) std::atomic<uint64_t> head;  // ids pushed in total (owner)
  alignas(64) std::atomic<uint64_t> tail;  // ids taken in total (filler)
  std::atomic<uint32_t> ids[kFreeSlots];
};

struct RingHeader {
  alignas(64) std::atomic<uint64_t> head;  // bytes written in total (producer)
  std::atomic<uint32_t> data_seq;          // futex: bumped by the producer after publishing
  std::atomic<uint32_t> consumer_waiting;
  alignas(64) std::atomic<uint64_t> tail;  // bytes consumed in total (consumer)
  std::atomic<uint32_t> space_seq;         // futex: bumped by the consumer after consuming
  std::atomic<uint32_t> producer_waiting;
  alignas(64) uint64_t magic;
  uint64_t capacity;
  FreeQueue frees;
};
static_assert(sizeof(RingHeader) <= kHeaderBytes, "ring header fits its page");

// Why a copy stopped before its n bytes: the channel is closing, or the peer is gone.
enum class RingStop { kNone, kClosed, kPeerGone };

struct Ring {
  void* base = nullptr;
  size_t mapped = 0;
  RingHeader* h = nullptr;
  char* data = nullptr;
  uint64_t cap = 0;

  void Unmap();

  // Producer side (sender thread): copies n bytes into the ring, publishing every kChunk. False
  // and *stop when the ring is full and `closing` or `peer_gone` is set.
  bool Write(const char* src, uint64_t n, const std::atomic<bool>& closing, const std::atomic<bool>& peer_gone,
             RingStop* stop);
  // Consumer side (receiver thread): copies n bytes out of the ring (dst may be null: discard).
  // False and *stop when the ring is empty and `closing` or `peer_gone` is set.
  bool Read(char* dst, uint64_t n, const std::atomic<bool>& closing, const std::atomic<bool>& peer_gone,
            RingStop* stop);

  // Any thread: wakes our producer sleeping on a full ring (WakeWriter) or our consumer sleeping on
  // an empty one (WakeReader), so it rechecks the channel's flags now.
  void WakeWriter();
  void WakeReader();
};

// The ring's data bytes: TPRPC_SHM_RING_BYTES (default 8 MiB), at least 64 KiB, a power of two.
uint64_t RingBytesFromEnv();

// Maps a ring of `cap` data bytes from `fd`; initializes the header when `init`, else checks it.
bool MapRing(int fd, uint64_t cap, bool init, Ring* r, std::string* why);

}  // namespace shm
}  // namespace channels
}  // namespace tprpc
