// See common.h. Completer settlements run on the JS thread; FutexWait/Wake on any thread.
#include "channels/common.h"

#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <cstring>

namespace tprpc {
namespace channels {

struct Completer::Job {
  Napi::Promise::Deferred deferred;
  Napi::Reference<Napi::Value> keep;
  Outcome outcome;
};

Napi::Error ToJsError(Napi::Env env, const Outcome& o) {
  std::string text = o.message;
  if (o.err != 0) text += std::string(" (") + std::strerror(o.err) + ")";
  Napi::Error e = Napi::Error::New(env, text);
  e.Set("name", Napi::String::New(env, "NativeError"));
  e.Set("code", Napi::String::New(env, o.code));
  e.Set("errno", Napi::Number::New(env, o.err));
  return e;
}

Completer* Completer::Create(Napi::Env env, const char* name) {
  auto* self = new Completer();
  self->tsfn_ = Tsfn::New(env, name, 0, 1, self, [](Napi::Env, void*, Completer* c) { delete c; });
  self->tsfn_.Unref(env);  // NB: an idle channel must not keep the process alive; Begin() refs while jobs are open.
  return self;
}

Completer::Job* Completer::Begin(Napi::Env env, Napi::Value keep, Napi::Value* promise) {
  auto* job = new Job{Napi::Promise::Deferred::New(env), {}, {}};
  if (!keep.IsUndefined() && !keep.IsNull()) job->keep = Napi::Persistent(keep);
  *promise = job->deferred.Promise();
  if (open_++ == 0 && !released_) tsfn_.Ref(env);
  return job;
}

void Completer::Finish(Job* job, Outcome outcome) {
  job->outcome = std::move(outcome);
  // NB: BlockingCall with an unbounded queue never blocks; it fails only after Release(),
  // which close() calls after joining every thread that could get here.
  tsfn_.BlockingCall(job);
}

void Completer::Settle(Napi::Env env, Job* job, const Outcome& outcome) {
  Napi::HandleScope scope(env);
  if (outcome.ok)
    job->deferred.Resolve(Napi::Number::New(env, outcome.value));
  else
    job->deferred.Reject(ToJsError(env, outcome).Value());
  delete job;
  Done(env);
}

void Completer::CallJs(Napi::Env env, Napi::Function, Completer* self, Job* job) {
  if (env == nullptr) return;  // NB: environment teardown: the job (and its pin) is abandoned with the process.
  self->Settle(env, job, job->outcome);
}

void Completer::Done(Napi::Env env) {
  if (--open_ == 0 && !released_) tsfn_.Unref(env);
}

void Completer::Release() {
  if (released_) return;
  released_ = true;
  tsfn_.Release();
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms) {
  struct timespec ts;
  ts.tv_sec = timeout_ms / 1000;
  ts.tv_nsec = static_cast<long>(timeout_ms % 1000) * 1000000L;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word, int count) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, count, nullptr, nullptr, 0);
}

double NumberArg(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* what) {
  if (info.Length() <= i || !info[i].IsNumber())
    throw Napi::TypeError::New(info.Env(), std::string(fn) + ": " + what + " must be a number");
  return info[i].As<Napi::Number>().DoubleValue();
}

Bytes BytesArg(const Napi::Value& v, const char* fn) {
  Bytes b;
  if (v.IsArrayBuffer()) {
    auto ab = v.As<Napi::ArrayBuffer>();
    b.data = static_cast<char*>(ab.Data());
    b.length = ab.ByteLength();
  } else if (v.IsTypedArray()) {
    auto ta = v.As<Napi::TypedArray>();
    b.data = static_cast<char*>(ta.ArrayBuffer().Data()) + ta.ByteOffset();
    b.length = ta.ByteLength();
  } else if (v.IsDataView()) {
    auto dv = v.As<Napi::DataView>();
    b.data = static_cast<char*>(dv.ArrayBuffer().Data()) + dv.ByteOffset();
    b.length = dv.ByteLength();
  } else {
    throw Napi::TypeError::New(v.Env(), std::string(fn) + ": expected an ArrayBuffer or a TypedArray");
  }
  return b;
}

}  // namespace channels
}  // namespace tprpc
