// Storages in shared memory (Tensor.shareMemory_) and how the shm channel hands them to a peer
// without copying their bytes. See shared.cc for the protocol and its guarantees.
#pragma once
#include <napi.h>

#include <cstdint>
#include <string>

namespace tprpc {
namespace channels {

// JS thread. When [p, p + n) lies in a shared storage of this process and the storage's file holds
// exactly the bytes the process sees there (freezing the file first if it was still writable),
// sets *fd (borrowed: valid until the JS thread returns to the event loop) and *offset (of p in
// the file) and returns true. False: not in shared memory, or the process changed those bytes
// since the file was frozen (then the caller copies them as usual).
bool SharedSpanOf(const void* p, uint64_t n, int* fd, uint64_t* offset);

// JS thread: a new ArrayBuffer over [offset, offset + length) of a frozen file a peer sent, mapped
// copy-on-write; takes `fd` (closed when the buffer is freed, or here on failure). Throws a JS
// error (code EPROTO) when the file is not sealed against writes and shrinking, or too short.
Napi::Value MapShared(Napi::Env env, int fd, uint64_t offset, uint64_t length);

// Like MapShared, but copies the bytes into dest and unmaps at once; *why on failure.
bool CopyShared(int fd, uint64_t offset, char* dest, uint64_t length, std::string* why);

// Registers shareAlloc(byteLength) -> ArrayBuffer and isShared(view) -> boolean in `ns`.
void RegisterShared(Napi::Env env, Napi::Object ns);

}  // namespace channels
}  // namespace tprpc
