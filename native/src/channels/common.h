// Plumbing shared by the native channels (shm, cma, ucx): how a background
// thread settles a JS Promise, and the error shape every channel uses.
//
// A channel's work (copying into a ring, process_vm_readv, progressing UCX)
// runs on threads the channel owns, never on the JS thread. Each call from JS
// gets a Promise; its Job keeps the JS buffer alive until the Promise settles.
//
// Life of a Job:
//  1. JS thread: Completer::Begin() makes the Promise, pins the buffer (a
//     persistent reference) and keeps the event loop alive while any job is open.
//  2. Any thread: Completer::Finish(job, outcome) queues the job on a
//     thread-safe function.
//  3. JS thread: the queued call resolves or rejects the Promise (rejections are
//     errors named "NativeError" with `code` and `errno`, which sdk/native turns
//     into the sdk's NativeError), drops the pin and deletes the job.
// Completer::Settle() does 3. directly on the JS thread (used by close()).
#pragma once
#include <napi.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace tprpc {
namespace channels {

struct Outcome {
  bool ok = true;
  std::string code;     // e.g. "ECONNRESET", "ECHANNELCLOSED"; empty when ok
  int err = 0;          // errno, 0 when none applies
  std::string message;  // says what happened and what to do
  double value = 0;     // resolved value (when the call returns a number)

  static Outcome Fail(std::string code, int err, std::string message) {
    Outcome o;
    o.ok = false;
    o.code = std::move(code);
    o.err = err;
    o.message = std::move(message);
    return o;
  }
};

// The JS error for a failed outcome (JS thread).
Napi::Error ToJsError(Napi::Env env, const Outcome& o);

class Completer {
 public:
  struct Job;

  // JS thread. `name` shows in async hooks. The Completer deletes itself after Release()
  // once its queued settlements ran (the thread-safe function's finalizer).
  static Completer* Create(Napi::Env env, const char* name);
  // JS thread: a new job whose Promise is returned in *promise; `keep` (may be undefined) stays alive until it settles.
  Job* Begin(Napi::Env env, Napi::Value keep, Napi::Value* promise);
  // Any thread, once per job: settles it on the JS thread later.
  void Finish(Job* job, Outcome outcome);
  // JS thread, once per job (instead of Finish): settles it now.
  void Settle(Napi::Env env, Job* job, const Outcome& outcome);
  // JS thread, once, after no thread can call Finish any more. Queued settlements still run,
  // then the Completer is deleted: do not touch it after Release().
  void Release();

 private:
  static void CallJs(Napi::Env env, Napi::Function, Completer* self, Job* job);
  using Tsfn = Napi::TypedThreadSafeFunction<Completer, Job, CallJs>;
  void Done(Napi::Env env);
  Tsfn tsfn_;
  int open_ = 0;  // jobs not yet settled (JS thread only)
  bool released_ = false;
};

// Futex on a word that may live in memory shared with another process (no FUTEX_PRIVATE).
// Wait returns when woken, on timeout, or at once when *word != expected.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms);
void FutexWake(std::atomic<uint32_t>* word, int count);

// Reads an optional number argument; `dflt` when absent.
double NumberArg(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* what);

// Data pointer and byte length of an ArrayBuffer or TypedArray argument.
struct Bytes {
  char* data = nullptr;
  size_t length = 0;
};
Bytes BytesArg(const Napi::Value& v, const char* fn);

}  // namespace channels

void RegisterChannels(Napi::Env env, Napi::Object exports);

}  // namespace tprpc
