// latencySlice(us): asks the kernel for a short scheduler slice for the calling thread (the JS
// thread of a process that opens a pipe; the channel threads it starts later inherit it).
//
// Why (issue 23, "wake-ups in shm under contention"): a round trip wakes a sleeping process twice
// (the request's frame, the reply's). On cores that busy processes keep full, EEVDF (Linux 6.6+)
// lets the running task finish its slice before a woken one runs unless the woken task asks for a
// shorter slice than the running one's (PREEMPT_SHORT, Linux 6.12+: sched_setattr's sched_runtime
// for SCHED_OTHER, 0.1-100 ms, no privilege needed). With the default slice (about 1.4 ms here) and
// a 250 Hz tick, a woken peer waited up to a tick (4 ms) for its core. A short slice changes only
// when the thread may preempt and be preempted, not its share of the CPU (its weight, i.e. its nice
// value, is kept as it is).
//
// Left alone: threads whose policy is not SCHED_OTHER (the user chose batch, idle or real time).
// Kernels before 6.12 ignore the field (sched_getattr then reports no custom slice): returns 0.
// Threads: the JS thread.
#include <napi.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace tprpc {
namespace channels {
namespace {

// The kernel's struct sched_attr (include/uapi/linux/sched/types.h), version 1 (with utilization clamps).
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
  uint32_t sched_util_min;
  uint32_t sched_util_max;
};

constexpr uint64_t kResetOnFork = 0x01;  // SCHED_FLAG_RESET_ON_FORK: kept as the thread had it

bool GetAttr(SchedAttr* a) {
  *a = {};
  return syscall(SYS_sched_getattr, 0, a, sizeof *a, 0) == 0;
}

// The slice in effect for this thread in ns (0: the kernel reports none, e.g. before 6.12).
uint64_t CurrentSlice() {
  SchedAttr a;
  return GetAttr(&a) && a.sched_policy == SCHED_OTHER ? a.sched_runtime : 0;
}

Napi::Value LatencySlice(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) {
    Napi::TypeError::New(env, "latencySlice(us): us must be a number").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  double us = info[0].As<Napi::Number>().DoubleValue();
  SchedAttr a;
  // NB: the kernel takes 0.1-100 ms; anything else (NaN, infinities included) asks for nothing
  if (us >= 100 && us <= 100000 && GetAttr(&a) && a.sched_policy == SCHED_OTHER) {
    a.size = sizeof a;
    a.sched_flags &= kResetOnFork;  // NB: no util-clamp flags: those stay as they are
    a.sched_runtime = static_cast<uint64_t>(us * 1000);
    a.sched_deadline = a.sched_period = 0;
    syscall(SYS_sched_setattr, 0, &a, 0);  // NB: on failure the slice read below says so
  }
  return Napi::Number::New(env, static_cast<double>(CurrentSlice()) / 1000);
}

}  // namespace

void RegisterSched(Napi::Env env, Napi::Object ns) { ns.Set("latencySlice", Napi::Function::New(env, LatencySlice)); }

}  // namespace channels
}  // namespace tprpc
