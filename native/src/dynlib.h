// The one place in the addon that loads run-time libraries (CUDA driver, NVRTC,
// cuBLAS, NCCL, UCX) with dlopen. Each library is described by a table row:
// candidate sonames, tried in order, and the symbols tprpc needs from it. A
// library is "viable" when one soname loads and every symbol resolves (for the
// CUDA driver, also when cuInit succeeds and reports at least one device);
// otherwise its status carries a reason string and the missing symbols. Nothing
// here crashes on a machine without these libraries: one prebuilt binary runs
// everywhere, and the channels ask `Probe()` before using a library.
//
// Thread safety: Probe() and Symbol() may be called from any thread; each
// library is probed once (std::call_once) and its handle kept for the process.
#pragma once
#include <string>
#include <vector>

namespace tprpc {

enum class Lib : int { Cuda = 0, Nvrtc, Cublas, Nccl, Ucx, Count };

struct LibStatus {
  bool viable = false;
  std::string path;                  // file the soname resolved to (empty when none loaded)
  std::string version;               // e.g. "12.4", "2.21.5"; empty when unknown
  std::string reason;                // why not viable; empty when viable
  std::vector<std::string> missing;  // required symbols that did not resolve
  int devices = -1;                  // CUDA driver only: cuDeviceGetCount, -1 when not asked
};

// Short name used in capabilities(): "cuda", "nvrtc", "cublas", "nccl", "ucx".
const char* LibName(Lib lib);

// Loads (once) and reports the library's status.
const LibStatus& Probe(Lib lib);

// A required symbol of a viable library; nullptr when the library is not viable
// or `name` is not in its table row (ask for it there first).
void* Symbol(Lib lib, const char* name);

}  // namespace tprpc
