// See block_tracker.h.
#include "gpu/block_tracker.h"

#include <exception>
#include <string>

#include "errors.h"
#include "napi_bigint.h"

namespace tprpc {
namespace gpu {

void BlockTracker::Track(Napi::Env env, napi_value owner, int device, uint64_t ptr, size_t bytes) {
  napi_ref ref = nullptr;
  // NB: refcount 0: weak from the start; the object is not kept alive by this reference
  if (napi_create_reference(env, owner, 0, &ref) != napi_ok)
    ThrowNative(env, "EINVAL", 0, "trackBlock: the owner must be an object");
  live_.push_back(Entry{ref, ptr, bytes, device});
  live_bytes_ += bytes;
}

BlockTracker::Swept BlockTracker::Sweep(Napi::Env env) {
  Swept out;
  ++sweeps_;
  size_t keep = 0;
  const size_t n = live_.size();
  // NB: napi_get_reference_value makes a local handle per live owner; a scope per chunk bounds them
  constexpr size_t kChunk = 1024;
  for (size_t start = 0; start < n; start += kChunk) {
    napi_handle_scope scope = nullptr;
    napi_open_handle_scope(env, &scope);
    const size_t end = start + kChunk < n ? start + kChunk : n;
    for (size_t i = start; i < end; ++i) {
      Entry& e = live_[i];
      napi_value v = nullptr;
      // NB: a failed lookup keeps the block: never free one whose owner may be alive
      if (napi_get_reference_value(env, e.owner, &v) != napi_ok || v != nullptr) {
        live_[keep++] = e;
        continue;
      }
      napi_delete_reference(env, e.owner);
      try {
        free_(env, e.device, e.ptr);
      } catch (const Napi::Error&) {
        ++out.failed;  // NB: a failing free (driver shutting down) must not stop the sweep
      } catch (const std::exception&) {
        ++out.failed;
      }
      out.bytes += e.bytes;
      ++out.blocks;
    }
    napi_close_handle_scope(env, scope);
  }
  live_.resize(keep);
  live_bytes_ -= out.bytes;
  freed_blocks_ += out.blocks;
  return out;
}

namespace {


Napi::Value TrackBlock(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* t = static_cast<BlockTracker*>(info.Data());
  if (!info[0].IsObject()) ThrowNative(env, "EINVAL", 0, "trackBlock: the owner must be an object");
  t->Track(env, info[0], info[1].As<Napi::Number>().Int32Value(), BigIntU64(info[2]),
           static_cast<size_t>(info[3].As<Napi::Number>().Int64Value()));
  return env.Undefined();
}

Napi::Value SweepBlocks(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  BlockTracker::Swept s = static_cast<BlockTracker*>(info.Data())->Sweep(env);
  auto o = Napi::Object::New(env);
  o.Set("bytes", Napi::Number::New(env, static_cast<double>(s.bytes)));
  o.Set("blocks", Napi::Number::New(env, static_cast<double>(s.blocks)));
  o.Set("failed", Napi::Number::New(env, static_cast<double>(s.failed)));
  return o;
}

Napi::Value TrackedBlocks(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const auto* t = static_cast<const BlockTracker*>(info.Data());
  auto o = Napi::Object::New(env);
  o.Set("bytes", Napi::Number::New(env, static_cast<double>(t->live_bytes())));
  o.Set("blocks", Napi::Number::New(env, static_cast<double>(t->live_blocks())));
  o.Set("sweeps", Napi::Number::New(env, static_cast<double>(t->sweeps())));
  o.Set("freedBlocks", Napi::Number::New(env, static_cast<double>(t->freed_blocks())));
  return o;
}

}  // namespace

void AddBlockTracker(Napi::Env env, Napi::Object ns, BlockTracker::FreeFn free) {
  auto* t = new BlockTracker(free);
  // NB: at teardown Node deletes the env's references itself; the blocks go with the process
  napi_add_env_cleanup_hook(
      env,
      [](void* p) {
        auto* tracker = static_cast<BlockTracker*>(p);
        tracker->Abandon();
        delete tracker;
      },
      t);
  ns.Set("trackBlock", Napi::Function::New(env, TrackBlock, "trackBlock", t));
  ns.Set("sweepBlocks", Napi::Function::New(env, SweepBlocks, "sweepBlocks", t));
  ns.Set("trackedBlocks", Napi::Function::New(env, TrackedBlocks, "trackedBlocks", t));
}

}  // namespace gpu
}  // namespace tprpc
