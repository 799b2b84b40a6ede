// The cma channel's data path: the receiver copies the sender's bytes straight
// out of the sender's address space with process_vm_readv (cross-memory
// attach): one copy, no shared segment, nothing to leak.
//
// Protocol (the TS side, sdk/channel/cma, runs it over the control connection):
//  1. Viability, per peer: each side publishes cmaProbeWord() {pid, address,
//     value}; the other side calls cmaCheck(pid, address, value), which reads
//     the 8 bytes with process_vm_readv and compares. The kernel allows it only
//     when we may ptrace the peer (same uid, and Yama ptrace_scope 0, or
//     CAP_SYS_PTRACE; a seccomp profile may forbid the syscall outright), so the
//     actual syscall is the test; the Yama setting only explains a refusal.
//  2. Transfer: the sender pins its buffer and sends {address, length}; the
//     receiver calls cmaRead(pid, address, length, dest) (off the JS thread; large
//     reads split across threads) and acknowledges; then the sender unpins.
//  3. A peer that dies mid-read makes the syscall fail with ESRCH (or EFAULT once
//     its memory is gone): the read rejects with code ECONNRESET.
//
// Threads: cmaProbeWord/cmaCheck on the JS thread (one 8-byte syscall);
// cmaRead's copy on a libuv worker thread plus helper threads for large reads.
#include <errno.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "channels/common.h"

namespace tprpc {
namespace channels {
namespace {

constexpr uint64_t kSplitMin = 8ull << 20;  // reads from here are split across threads
constexpr uint64_t kMaxIov = 1ull << 30;    // bytes per syscall (the kernel may copy less; we loop)

alignas(64) volatile uint64_t g_probe_word = 0;

int YamaScope() {
  std::ifstream f("/proc/sys/kernel/yama/ptrace_scope");
  int v = -1;
  if (f >> v) return v;
  return -1;
}

std::string YamaHint() {
  int y = YamaScope();
  if (y < 0) return "no Yama LSM here: a seccomp profile (e.g. a container's) or a different uid refuses it";
  return "Yama ptrace_scope is " + std::to_string(y) +
         (y == 0 ? " (permissive: a seccomp profile or a different uid refuses it)"
                 : " (1: only ancestors may read a process; 2-3: admin only); set it to 0 to use cma");
}

Outcome ErrorFor(int err, int pid, const char* what) {
  std::string p = std::to_string(pid);
  switch (err) {
    case EPERM:
    case EACCES:
      return Outcome::Fail("ECMAPERM", err,
                           std::string("cma channel: ") + what + " from process " + p + " was refused; " + YamaHint() +
                               ". tprpc uses the shm or tcp channel instead");
    case ESRCH:
      return Outcome::Fail("ECONNRESET", err, "cma channel: peer process " + p + " exited during a transfer");
    case EFAULT:
      return Outcome::Fail("EFAULT", err,
                           std::string("cma channel: ") + what + ": the range is not mapped in process " + p +
                               " (its buffer was freed before the transfer finished, or the process is exiting)");
    case ENOSYS:
      return Outcome::Fail("ENOSYS", err, "cma channel: process_vm_readv is not available in this kernel");
    default:
      return Outcome::Fail("ECMA", err, std::string("cma channel: ") + what + " from process " + p + " failed");
  }
}

// Copies [remote, remote+n) of process pid into local; loops over partial copies.
Outcome ReadRange(int pid, uint64_t remote, char* local, uint64_t n) {
  while (n > 0) {
    uint64_t want = std::min(n, kMaxIov);
    struct iovec l = {local, want};
    struct iovec r = {reinterpret_cast<void*>(remote), want};
    ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrorFor(errno, pid, "process_vm_readv");
    }
    if (got == 0) return ErrorFor(EFAULT, pid, "process_vm_readv");
    remote += static_cast<uint64_t>(got);
    local += got;
    n -= static_cast<uint64_t>(got);
  }
  return Outcome();
}

class ReadWorker : public Napi::AsyncWorker {
 public:
  ReadWorker(Napi::Env env, int pid, uint64_t remote, Bytes dest, Napi::Value keep)
      : Napi::AsyncWorker(env, "tprpc.cma.read"),
        deferred_(Napi::Promise::Deferred::New(env)),
        pid_(pid),
        remote_(remote),
        dest_(dest),
        keep_(Napi::Persistent(keep)) {}

  Napi::Value Promise() { return deferred_.Promise(); }

  // libuv worker thread (and helpers for large reads).
  void Execute() override {
    uint64_t n = dest_.length;
    unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    unsigned parts = n >= kSplitMin ? std::min<unsigned>(4, hw) : 1;
    if (parts <= 1) {
      outcome_ = ReadRange(pid_, remote_, dest_.data, n);
      return;
    }
    uint64_t step = (n / parts + 4095) & ~uint64_t{4095};
    std::vector<Outcome> outs(parts);
    std::vector<std::thread> helpers;
    for (unsigned i = 1; i < parts; ++i) {
      uint64_t b = std::min(n, i * step), e = std::min(n, (i + 1) * step);
      if (i == parts - 1) e = n;
      helpers.emplace_back([&, i, b, e] { outs[i] = ReadRange(pid_, remote_ + b, dest_.data + b, e - b); });
    }
    outs[0] = ReadRange(pid_, remote_, dest_.data, std::min(n, step));
    for (auto& t : helpers) t.join();
    for (auto& o : outs)
      if (!o.ok) {
        outcome_ = o;
        break;
      }
  }

  void OnOK() override {
    Napi::Env env = Env();
    keep_.Reset();
    if (outcome_.ok)
      deferred_.Resolve(Napi::Number::New(env, static_cast<double>(dest_.length)));
    else
      deferred_.Reject(ToJsError(env, outcome_).Value());
  }

  void OnError(const Napi::Error& e) override {
    keep_.Reset();
    deferred_.Reject(e.Value());
  }

 private:
  Napi::Promise::Deferred deferred_;
  int pid_;
  uint64_t remote_;
  Bytes dest_;
  Napi::Reference<Napi::Value> keep_;
  Outcome outcome_;
};

int PidArg(const Napi::CallbackInfo& info, const char* fn) {
  double pid = NumberArg(info, 0, fn, "pid");
  if (!(pid > 0) || pid != static_cast<double>(static_cast<int>(pid)))
    throw Napi::RangeError::New(info.Env(), std::string(fn) + ": pid must be a positive integer");
  return static_cast<int>(pid);
}

uint64_t AddressArg(const Napi::CallbackInfo& info, size_t i, const char* fn) {
  double a = NumberArg(info, i, fn, "address");
  if (!(a >= 0) || a > 9007199254740991.0) throw Napi::RangeError::New(info.Env(), std::string(fn) + ": bad address");
  return static_cast<uint64_t>(a);
}

// cmaProbeWord() -> { pid, address, value }: a word of ours a peer reads to test cma.
Napi::Value ProbeWord(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (g_probe_word == 0) {
    std::random_device rd;
    g_probe_word = (((static_cast<uint64_t>(rd()) << 32) | rd()) & ((1ull << 53) - 1)) | 1;
  }
  auto o = Napi::Object::New(env);
  o.Set("pid", Napi::Number::New(env, getpid()));
  o.Set("address", Napi::Number::New(env, static_cast<double>(reinterpret_cast<uintptr_t>(&g_probe_word))));
  o.Set("value", Napi::Number::New(env, static_cast<double>(g_probe_word)));  // NB: < 2^53, exact
  return o;
}

// cmaCheck(pid, address, value) -> { viable, code?, errno?, reason?, yama }
Napi::Value Check(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int pid = PidArg(info, "cmaCheck");
  uint64_t addr = AddressArg(info, 1, "cmaCheck");
  double expected = NumberArg(info, 2, "cmaCheck", "value");
  uint64_t word = 0;
  Outcome o = ReadRange(pid, addr, reinterpret_cast<char*>(&word), sizeof word);
  if (o.ok && static_cast<double>(word) != expected)
    o = Outcome::Fail("EPROTO", 0,
                      "cma channel: the word read from process " + std::to_string(pid) +
                          " differs from what it announced (another process with that pid: a different pid namespace?)");
  auto r = Napi::Object::New(env);
  r.Set("viable", Napi::Boolean::New(env, o.ok));
  r.Set("yama", Napi::Number::New(env, YamaScope()));
  if (!o.ok) {
    r.Set("code", Napi::String::New(env, o.code));
    r.Set("errno", Napi::Number::New(env, o.err));
    r.Set("reason", Napi::String::New(env, o.message));
  }
  return r;
}

// cmaRead(pid, address, dest): Promise<number> — fills dest (its whole byteLength) from the peer.
Napi::Value Read(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int pid = PidArg(info, "cmaRead");
  uint64_t addr = AddressArg(info, 1, "cmaRead");
  Bytes dest = BytesArg(info[2], "cmaRead");
  auto* w = new ReadWorker(env, pid, addr, dest, info[2]);
  Napi::Value p = w->Promise();
  w->Queue();
  return p;
}

}  // namespace

void RegisterCma(Napi::Env env, Napi::Object ns) {
  ns.Set("cmaProbeWord", Napi::Function::New(env, ProbeWord));
  ns.Set("cmaCheck", Napi::Function::New(env, Check));
  ns.Set("cmaRead", Napi::Function::New(env, Read));
}

}  // namespace channels
}  // namespace tprpc
