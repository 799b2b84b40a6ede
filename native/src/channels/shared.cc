// Storages in shared memory (Tensor.shareMemory_), and how the shm channel hands one to a peer on
// the same host without copying it, while each side keeps value semantics: the receiver's tensor
// never changes when the sender later writes to its own, nor the other way round.
//
// A shared storage is a memfd mapped into this process (shareAlloc); its typed array views the
// mapping. Life of the file:
//  1. Writable: made by shareAlloc (sealed against shrinking and growing), mapped MAP_SHARED.
//  2. Frozen, at its first hand-off (SharedSpanOf): the process's own mapping is replaced, at the
//     same address and with the same contents, by a private (copy-on-write) mapping of the file,
//     and the file is sealed against writes (F_SEAL_WRITE). Nobody can change the file after
//     that; the process's later writes go to private copies of the pages they touch.
//  3. The peer checks those seals and maps the file copy-on-write too (MapShared): its writes stay
//     its own as well.
//  4. A later hand-off of a frozen range, by the creator or by a receiver passing it on, is
//     zero-copy only where the process wrote none of its pages since: /proc/self/pagemap tells,
//     per page, whether the mapping still shows the file's page (or none yet) or a private copy.
//     Otherwise SharedSpanOf says no and the channel copies the bytes as for any buffer.
// Each mapping is unmapped, and its descriptor closed, when V8 frees its ArrayBuffer.
#include "channels/shared.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "channels/common.h"

namespace tprpc {
namespace channels {
namespace {

constexpr unsigned kSealed = F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW;

struct Seg {
  uint64_t len;       // of the mapping (whole pages)
  int fd;             // the file, open while the mapping lives
  uint64_t file_off;  // of the mapping's first byte in the file
  bool frozen;        // mapped privately (state 2 above); false: still MAP_SHARED
  bool sealed;        // frozen, and the file sealed against writes (only then may it go to a peer)
};

std::mutex g_mu;
std::map<uintptr_t, Seg> g_segs;  // by mapping address

uint64_t PageSize() {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// The mapping that holds [p, p + n), or end(); g_mu held.
std::map<uintptr_t, Seg>::iterator Find(uintptr_t p, uint64_t n) {
  auto it = g_segs.upper_bound(p);
  if (it == g_segs.begin()) return g_segs.end();
  --it;
  if (p + n > it->first + it->second.len) return g_segs.end();
  return it;
}

// Replaces the shared mapping at `base` by a private one of the same file range (same contents,
// same address: mremap swaps it in, so a failure leaves the old mapping in place), then seals the
// file against writes (no shared writable mapping is left). g_mu held.
bool Freeze(uintptr_t base, Seg* s) {
  void* tmp = mmap(nullptr, s->len, PROT_READ | PROT_WRITE, MAP_PRIVATE, s->fd, static_cast<off_t>(s->file_off));
  if (tmp == MAP_FAILED) return false;
  void* at = mremap(tmp, s->len, s->len, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(base));
  if (at == MAP_FAILED) {
    munmap(tmp, s->len);
    return false;
  }
  s->frozen = true;  // NB: private from here on, whether or not the seal below takes
  s->sealed = fcntl(s->fd, F_ADD_SEALS, F_SEAL_WRITE) == 0;
  return s->sealed;
}

// Whether this process has written none of the pages of [p, p + n) in its private mapping: each
// pagemap entry is "not present" (reads would show the file) or a present file page (bit 61);
// a present anonymous page (a private copy) or a swapped one means it wrote there.
bool Untouched(uintptr_t p, uint64_t n) {
  static const int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pagemap < 0) return false;
  const uint64_t page = PageSize();
  uint64_t first = p / page, last = (p + n - 1) / page;
  std::vector<uint64_t> entries(std::min<uint64_t>(last - first + 1, 1 << 16));
  for (uint64_t pg = first; pg <= last;) {
    uint64_t count = std::min<uint64_t>(entries.size(), last - pg + 1);
    ssize_t got = pread(pagemap, entries.data(), count * 8, static_cast<off_t>(pg * 8));
    if (got != static_cast<ssize_t>(count * 8)) return false;
    for (uint64_t i = 0; i < count; i++) {
      uint64_t e = entries[i];
      if ((e >> 62) & 1) return false;                       // swapped: a private page
      if (((e >> 63) & 1) && !((e >> 61) & 1)) return false;  // present and anonymous: a private copy
    }
    pg += count;
  }
  return true;
}

// Maps [offset, offset + length) of a frozen file copy-on-write; *base/*len: the whole mapping,
// *delta: where the range starts in it. Checks the seals and the size first (a peer that could
// still write or shrink the file would break value semantics, or fault us with SIGBUS).
bool MapPrivate(int fd, uint64_t offset, uint64_t length, void** base, uint64_t* len, uint64_t* delta,
                std::string* why) {
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (static_cast<unsigned>(seals) & kSealed) != kSealed) {
    *why = "shm channel: the peer sent a shared storage whose file is not sealed against writes and resizing";
    return false;
  }
  struct stat st = {};
  if (length == 0 || fstat(fd, &st) != 0 || offset + length < offset ||
      offset + length > static_cast<uint64_t>(st.st_size)) {
    *why = "shm channel: the peer named " + std::to_string(length) + " bytes at " + std::to_string(offset) +
           " of a shared storage of " + std::to_string(st.st_size) + " bytes";
    return false;
  }
  const uint64_t page = PageSize();
  *delta = offset % page;
  *len = (*delta + length + page - 1) / page * page;
  *base = mmap(nullptr, *len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, static_cast<off_t>(offset - *delta));
  if (*base == MAP_FAILED) {
    *why = std::string("shm channel: cannot map a shared storage of ") + std::to_string(length) +
           " bytes: " + std::strerror(errno);
    return false;
  }
  return true;
}

void Unregister(void* base) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_segs.find(reinterpret_cast<uintptr_t>(base));
  if (it == g_segs.end()) return;
  munmap(base, it->second.len);
  close(it->second.fd);
  g_segs.erase(it);
}

// What V8 is told a received mapping costs. V8 counts every ArrayBuffer's length as external memory,
// which sets off its mark-compacts (64 MiB above the last one), but a copy-on-write mapping of a
// peer's file costs only the pages this process writes; counting its whole length would set off a
// mark-compact every few 4 MB receives. Counting at
// most kCounted per mapping still bounds how many mappings (and descriptors) wait for a collection.
constexpr uint64_t kCounted = 1ull << 20;

struct Fin {
  void* base;
  int64_t hidden;  // bytes taken off V8's external memory for this buffer
};

Napi::ArrayBuffer Track(Napi::Env env, void* base, const Seg& s, uint64_t delta, uint64_t length, bool received) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_segs[reinterpret_cast<uintptr_t>(base)] = s;
  }
  auto* fin = new Fin{base, received ? static_cast<int64_t>(length - std::min(length, kCounted)) : 0};
  // NB: taken off before V8 adds the length, so the sum never crosses its trigger on the way
  if (fin->hidden != 0) Napi::MemoryManagement::AdjustExternalMemory(env, -fin->hidden);
  // NB: Node runs the finalizer on the JS thread once V8 freed the buffer (and subtracted its length)
  Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(
      env, static_cast<char*>(base) + delta, length,
      [](Napi::Env env, void*, Fin* f) {
        if (f->hidden != 0) Napi::MemoryManagement::AdjustExternalMemory(env, f->hidden);
        Unregister(f->base);
        delete f;
      },
      fin);
  return ab;
}

// shareAlloc(byteLength) -> ArrayBuffer over a fresh shared file (state 1), zero-filled.
Napi::Value ShareAlloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  double n = NumberArg(info, 0, "shareAlloc", "byteLength");
  if (!(n >= 0) || n > 9007199254740991.0) throw Napi::RangeError::New(env, "shareAlloc: byteLength must be >= 0");
  const uint64_t length = static_cast<uint64_t>(n);
  const uint64_t page = PageSize();
  const uint64_t len = std::max<uint64_t>(page, (length + page - 1) / page * page);
  int fd = memfd_create("tprpc-shared-storage", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  void* base = MAP_FAILED;
  int err = 0;
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(len)) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
    err = errno;
  else if ((base = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0)) == MAP_FAILED)
    err = errno;
  if (base == MAP_FAILED) {
    if (fd >= 0) close(fd);
    throw ToJsError(env, Outcome::Fail(err == ENOMEM ? "ENOMEM" : "ESHARE", err,
                                       "shareMemory_: cannot allocate " + std::to_string(length) +
                                           " bytes of shared memory: " + std::strerror(err)));
  }
  return Track(env, base, {len, fd, 0, false, false}, 0, length, false);
}

// isShared(view) -> whether its bytes lie in a shared storage's mapping.
Napi::Value IsShared(const Napi::CallbackInfo& info) {
  Bytes b = BytesArg(info[0], "isShared");
  std::lock_guard<std::mutex> lock(g_mu);
  bool in = b.data != nullptr && Find(reinterpret_cast<uintptr_t>(b.data), std::max<uint64_t>(b.length, 1)) != g_segs.end();
  return Napi::Boolean::New(info.Env(), in);
}

}  // namespace

bool SharedSpanOf(const void* p, uint64_t n, int* fd, uint64_t* offset) {
  if (n == 0) return false;
  uintptr_t at = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = Find(at, n);
  if (it == g_segs.end()) return false;
  Seg& s = it->second;
  if (!s.frozen) {
    if (!Freeze(it->first, &s)) return false;  // NB: just frozen: no page can differ from the file yet
  } else if (!s.sealed || !Untouched(at, n)) {
    return false;  // NB: a failed seal leaves the file frozen for us only
  }
  *fd = s.fd;
  *offset = s.file_off + (at - it->first);
  return true;
}

Napi::Value MapShared(Napi::Env env, int fd, uint64_t offset, uint64_t length) {
  void* base = nullptr;
  uint64_t len = 0, delta = 0;
  std::string why;
  if (!MapPrivate(fd, offset, length, &base, &len, &delta, &why)) {
    close(fd);
    throw ToJsError(env, Outcome::Fail("EPROTO", 0, why));
  }
  return Track(env, base, {len, fd, offset - delta, true, true}, delta, length, true);  // NB: MapPrivate checked the seals
}

bool CopyShared(int fd, uint64_t offset, char* dest, uint64_t length, std::string* why) {
  void* base = nullptr;
  uint64_t len = 0, delta = 0;
  bool ok = MapPrivate(fd, offset, length, &base, &len, &delta, why);
  if (ok) {
    std::memcpy(dest, static_cast<char*>(base) + delta, length);
    munmap(base, len);
  }
  close(fd);
  return ok;
}

void RegisterShared(Napi::Env env, Napi::Object ns) {
  ns.Set("shareAlloc", Napi::Function::New(env, ShareAlloc));
  ns.Set("isShared", Napi::Function::New(env, IsShared));
}

}  // namespace channels
}  // namespace tprpc
