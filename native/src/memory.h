// Large CPU storages for tensors: 64-byte aligned, pooled by size class, and
// optionally backed by shared memory (memfd_create + mmap MAP_SHARED) so the SHM
// channel can hand the fd to a peer instead of copying the bytes.
//
// Life of a block:
//  1. alloc() takes a block of the request's size class from the free list, or maps a new one.
//  2. It reaches JS as an external ArrayBuffer; +capacity is reported to V8 as external memory.
//  3. When V8 collects the ArrayBuffer, its finalizer (JS thread) reports -capacity and
//     returns the block to the free list, unless the cache would exceed its bound
//     (default 256 MiB, TPRPC_POOL_BYTES), in which case the oldest cached blocks are unmapped.
//
// The pool is process-wide (shared by every worker_thread that loads the addon) and guarded by a mutex.
#pragma once
#include <napi.h>

#include <cstddef>

namespace tprpc {

struct SharedBlock {
  int fd = -1;              // memfd, open for the block's lifetime (send it with SCM_RIGHTS)
  size_t capacity = 0;      // bytes mapped (>= the ArrayBuffer's byteLength)
};

// The memfd behind a live shared block that starts at `data`; false when `data`
// is not the start of a live shared block. Any thread.
bool LookupShared(const void* data, SharedBlock* out);

}  // namespace tprpc
