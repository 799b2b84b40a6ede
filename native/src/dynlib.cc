// See dynlib.h. The table below is the whole list of run-time libraries tprpc may
// use; add a row (and its symbols) here, never a dlopen elsewhere. Also exports
// capabilities() to JS: SIMD level, threads, the linked BLAS and every library's status.
#include "dynlib.h"

#include <dlfcn.h>
#include <glob.h>
#include <cstdlib>
#include <link.h>
#include <napi.h>

#include <cstdio>
#include <mutex>

#include "thread_pool.h"

// The static OpenBLAS linked into the addon (binding.gyp).
extern "C" {
char* openblas_get_config(void);
char* openblas_get_corename(void);
int openblas_get_num_threads(void);
}

namespace tprpc {
namespace {

struct LibSpec {
  const char* name;
  std::vector<const char*> sonames;  // tried in order, newest first
  std::vector<const char*> symbols;  // all must resolve
};

// NB: versioned names (_v2) are what the CUDA headers map the plain names to since
// CUDA 11; the driver exports both, and the _v2 ones are the ABI we call.
const LibSpec kSpecs[static_cast<int>(Lib::Count)] = {
    {"cuda",
     {"libcuda.so.1", "libcuda.so"},
     {"cuInit", "cuDriverGetVersion", "cuGetErrorName", "cuGetErrorString", "cuDeviceGetCount", "cuDeviceGet",
      "cuDeviceGetName", "cuDeviceGetAttribute", "cuDeviceGetPCIBusId", "cuDevicePrimaryCtxRetain",
      "cuDevicePrimaryCtxRelease_v2", "cuCtxSetCurrent", "cuCtxGetCurrent", "cuMemGetInfo_v2", "cuMemAlloc_v2",
      "cuMemFree_v2", "cuMemAllocHost_v2", "cuMemFreeHost", "cuMemHostRegister_v2", "cuMemHostUnregister",
      "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2",
      "cuMemcpyPeerAsync", "cuPointerGetAttribute", "cuStreamCreate", "cuStreamDestroy_v2", "cuStreamSynchronize",
      "cuStreamWaitEvent", "cuEventCreate", "cuEventRecord", "cuEventSynchronize", "cuEventDestroy_v2",
      "cuIpcGetMemHandle", "cuIpcOpenMemHandle_v2", "cuIpcCloseMemHandle", "cuIpcGetEventHandle",
      "cuIpcOpenEventHandle", "cuModuleLoadData", "cuModuleUnload", "cuModuleGetFunction", "cuLaunchKernel",
      // caching allocator, streams, events, pinned host memory, async copies
      "cuStreamQuery", "cuEventQuery", "cuMemHostAlloc", "cuMemcpyDtoDAsync_v2", "cuMemGetAddressRange_v2",
      "cuCtxSynchronize", "cuMemsetD8Async"}},
    {"nvrtc",
     {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so.11.1", "libnvrtc.so.11.0", "libnvrtc.so"},
     {"nvrtcVersion", "nvrtcGetErrorString", "nvrtcCreateProgram", "nvrtcCompileProgram", "nvrtcGetPTXSize",
      "nvrtcGetPTX", "nvrtcGetProgramLogSize", "nvrtcGetProgramLog", "nvrtcDestroyProgram"}},
    {"cublas",
     {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"},
     {"cublasGetProperty", "cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasSetMathMode",
      "cublasSgemm_v2", "cublasDgemm_v2", "cublasSgemmStridedBatched", "cublasDgemmStridedBatched"}},
    {"nccl",
     {"libnccl.so.2", "libnccl.so"},
     {"ncclGetVersion", "ncclGetErrorString", "ncclGetUniqueId", "ncclCommInitRank", "ncclCommDestroy",
      "ncclCommAbort", "ncclCommGetAsyncError", "ncclGroupStart", "ncclGroupEnd", "ncclSend", "ncclRecv",
      "ncclAllReduce", "ncclBroadcast"}},
    {"ucx",
     {"libucp.so.0", "libucp.so"},
     // NB: ucs_status_string lives in libucs.so.0, a dependency of libucp; dlsym on
     // libucp's handle searches its dependencies too.
     {"ucp_get_version", "ucp_config_read", "ucp_config_release", "ucp_init_version", "ucp_cleanup",
      "ucp_worker_create", "ucp_worker_destroy", "ucp_worker_get_address", "ucp_worker_release_address",
      "ucp_worker_progress", "ucp_worker_get_efd", "ucp_worker_arm", "ucp_ep_create", "ucp_ep_close_nbx",
      "ucp_tag_send_nbx", "ucp_tag_recv_nbx", "ucp_request_check_status", "ucp_request_free",
      "ucs_status_string", "ucp_config_modify", "ucp_request_cancel"}},
};

struct Loaded {
  std::once_flag once;
  void* handle = nullptr;
  LibStatus status;
};

Loaded g_loaded[static_cast<int>(Lib::Count)];

template <typename F>
F Fn(void* handle, const char* name) {
  return reinterpret_cast<F>(dlsym(handle, name));
}

// Library-specific version query (and, for the CUDA driver, device discovery).
// Runs once, right after every symbol resolved; may turn the status non-viable.
void Describe(Lib lib, void* h, LibStatus& s) {
  char buf[64] = {0};
  switch (lib) {
    case Lib::Cuda: {
      int v = 0;
      if (Fn<int (*)(int*)>(h, "cuDriverGetVersion")(&v) == 0)
        std::snprintf(buf, sizeof buf, "%d.%d", v / 1000, (v % 1000) / 10);
      int rc = Fn<int (*)(unsigned)>(h, "cuInit")(0);
      int count = 0;
      if (rc == 0) rc = Fn<int (*)(int*)>(h, "cuDeviceGetCount")(&count);
      if (rc != 0) {
        const char* err = nullptr;
        Fn<int (*)(int, const char**)>(h, "cuGetErrorName")(rc, &err);
        s.viable = false;
        s.reason = std::string("the CUDA driver loaded but cuInit failed: ") + (err ? err : "unknown error") + " (" +
                   std::to_string(rc) + "); is a GPU visible to this process (CUDA_VISIBLE_DEVICES, container --gpus)?";
        count = 0;
      } else if (count == 0) {
        s.viable = false;
        s.reason = "the CUDA driver loaded but reports no devices";
      }
      s.devices = count;
      break;
    }
    case Lib::Nvrtc: {
      int major = 0, minor = 0;
      if (Fn<int (*)(int*, int*)>(h, "nvrtcVersion")(&major, &minor) == 0)
        std::snprintf(buf, sizeof buf, "%d.%d", major, minor);
      break;
    }
    case Lib::Cublas: {
      int v[3] = {0, 0, 0};  // libraryPropertyType: MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
      auto get = Fn<int (*)(int, int*)>(h, "cublasGetProperty");
      if (get(0, &v[0]) == 0 && get(1, &v[1]) == 0 && get(2, &v[2]) == 0)
        std::snprintf(buf, sizeof buf, "%d.%d.%d", v[0], v[1], v[2]);
      break;
    }
    case Lib::Nccl: {
      int v = 0;
      if (Fn<int (*)(int*)>(h, "ncclGetVersion")(&v) == 0) {
        if (v >= 10000) std::snprintf(buf, sizeof buf, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
        else std::snprintf(buf, sizeof buf, "%d.%d.%d", v / 1000, (v % 1000) / 100, v % 100);
      }
      break;
    }
    case Lib::Ucx: {
      unsigned major = 0, minor = 0, release = 0;
      Fn<void (*)(unsigned*, unsigned*, unsigned*)>(h, "ucp_get_version")(&major, &minor, &release);
      std::snprintf(buf, sizeof buf, "%u.%u.%u", major, minor, release);
      break;
    }
    default:
      break;
  }
  s.version = buf;
}

// cuBLAS outside the loader path: the directories of TPRPC_CUBLAS_DIR (':'-separated), then where
// PyTorch's wheels put it (nvidia-cublas-cu1x: site-packages/nvidia/cublas/lib) under the usual
// Python prefixes. libcublasLt (same directory) is loaded first, since libcublas needs it.
void* LoadFromWheelDirs(const LibSpec& spec, std::string& first_error) {
  std::vector<std::string> patterns;
  if (const char* dirs = std::getenv("TPRPC_CUBLAS_DIR")) {
    std::string all = dirs;
    for (size_t at = 0; at <= all.size();) {
      size_t end = all.find(':', at);
      if (end == std::string::npos) end = all.size();
      if (end > at) patterns.push_back(all.substr(at, end - at));
      at = end + 1;
    }
  }
  const char* tail = "/lib/python3*/*-packages/nvidia/cublas/lib";
  if (const char* venv = std::getenv("VIRTUAL_ENV")) patterns.push_back(std::string(venv) + tail);
  if (const char* conda = std::getenv("CONDA_PREFIX")) patterns.push_back(std::string(conda) + tail);
  if (const char* home = std::getenv("HOME")) patterns.push_back(std::string(home) + "/.local" + tail);
  for (const char* prefix : {"/usr/local", "/usr", "/opt/conda"}) patterns.push_back(std::string(prefix) + tail);
  patterns.push_back("/usr/lib/python3/dist-packages/nvidia/cublas/lib");
  for (const std::string& pattern : patterns) {
    glob_t g;
    if (glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g) != 0) continue;
    for (size_t i = 0; i < g.gl_pathc; ++i) {
      for (const char* soname : spec.sonames) {
        std::string lt = std::string(g.gl_pathv[i]) + "/" + soname;
        const std::string full = lt;
        lt.replace(lt.rfind("libcublas"), 9, "libcublasLt");
        dlopen(lt.c_str(), RTLD_NOW | RTLD_GLOBAL);  // NB: may be absent; libcublas then says so
        dlerror();
        void* h = dlopen(full.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (h != nullptr) {
          globfree(&g);
          return h;
        }
        const char* e = dlerror();
        if (first_error.empty() && e != nullptr) first_error = e;
      }
    }
    globfree(&g);
  }
  return nullptr;
}

void Load(Lib lib, Loaded& L) {
  const LibSpec& spec = kSpecs[static_cast<int>(lib)];
  LibStatus& s = L.status;
  std::string first_error;  // NB: the first soname is the preferred one, so its error says most
  if (std::string(spec.name) == "ucx") {
    // NB: libucm (loaded with libucp) patches malloc/mmap at load time to track memory for its
    // registration cache; under V8 that was seen to crash a worker in the garbage collector. The
    // host-memory transports used here do not need it. Read at load, so set before dlopen; a user's
    // own setting wins (InfiniBand users may want the hooks back: UCX_MEM_MMAP_HOOK_MODE=bistro).
    setenv("UCX_MEM_MALLOC_HOOKS", "no", 0);
    setenv("UCX_MEM_MMAP_HOOK_MODE", "none", 0);
  }
  for (const char* soname : spec.sonames) {
    dlerror();
    void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) {
      L.handle = h;
      break;
    }
    const char* e = dlerror();
    if (first_error.empty()) first_error = e ? e : soname;
  }
  if (L.handle == nullptr && lib == Lib::Cublas) L.handle = LoadFromWheelDirs(spec, first_error);
  if (L.handle == nullptr) {
    std::string tried;
    for (const char* n : spec.sonames) tried += std::string(tried.empty() ? "" : ", ") + n;
    s.reason = std::string(spec.name) + " is not installed or not on the loader path (tried " + tried +
               (lib == Lib::Cublas ? ", also in TPRPC_CUBLAS_DIR and PyTorch's site-packages/nvidia/cublas/lib" : "") +
               "; first error: " + first_error + "); install it or add its directory to LD_LIBRARY_PATH";
    return;
  }
  link_map* lm = nullptr;
  if (dlinfo(L.handle, RTLD_DI_LINKMAP, &lm) == 0 && lm != nullptr && lm->l_name != nullptr) s.path = lm->l_name;
  for (const char* sym : spec.symbols) {
    dlerror();
    if (dlsym(L.handle, sym) == nullptr) s.missing.push_back(sym);
  }
  if (!s.missing.empty()) {
    std::string list;
    for (auto& m : s.missing) list += std::string(list.empty() ? "" : ", ") + m;
    s.reason = s.path + " lacks " + std::to_string(s.missing.size()) + " required symbol(s): " + list +
               "; it is probably too old, install a newer " + spec.name;
    // NB: the handle stays open: unloading libraries such as libcuda is not always safe.
    return;
  }
  s.viable = true;
  Describe(lib, L.handle, s);
}

Napi::Object StatusToJs(Napi::Env env, const LibStatus& s) {
  auto o = Napi::Object::New(env);
  o.Set("viable", Napi::Boolean::New(env, s.viable));
  if (!s.path.empty()) o.Set("path", Napi::String::New(env, s.path));
  if (!s.version.empty()) o.Set("version", Napi::String::New(env, s.version));
  if (!s.reason.empty()) o.Set("reason", Napi::String::New(env, s.reason));
  if (!s.missing.empty()) {
    auto arr = Napi::Array::New(env, s.missing.size());
    for (uint32_t i = 0; i < s.missing.size(); ++i) arr.Set(i, Napi::String::New(env, s.missing[i]));
    o.Set("missing", arr);
  }
  if (s.devices >= 0) o.Set("devices", Napi::Number::New(env, s.devices));
  return o;
}

const char* SimdLevel() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
  if (__builtin_cpu_supports("sse4.2")) return "sse4";
  return "none";
}

// capabilities() -> { simd, threads, blas: {name, version, corename, threads, config}, libs: {cuda, ...} }
// JS thread; the first call probes every library (cuInit included), later calls reuse the result.
Napi::Value Capabilities(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto o = Napi::Object::New(env);
  o.Set("simd", Napi::String::New(env, SimdLevel()));
  o.Set("threads", Napi::Number::New(env, NumThreads()));

  auto blas = Napi::Object::New(env);
  std::string config = openblas_get_config();
  std::string version;
  if (config.rfind("OpenBLAS ", 0) == 0) version = config.substr(9, config.find(' ', 9) - 9);
  blas.Set("name", Napi::String::New(env, "openblas"));
  blas.Set("version", Napi::String::New(env, version));
  blas.Set("corename", Napi::String::New(env, openblas_get_corename()));
  blas.Set("threads", Napi::Number::New(env, openblas_get_num_threads()));
  blas.Set("config", Napi::String::New(env, config));
  o.Set("blas", blas);

  auto libs = Napi::Object::New(env);
  for (int i = 0; i < static_cast<int>(Lib::Count); ++i)
    libs.Set(LibName(static_cast<Lib>(i)), StatusToJs(env, Probe(static_cast<Lib>(i))));
  o.Set("libs", libs);
  return o;
}

// libraryTable() -> { cuda: { sonames, symbols }, ... }: what tprpc looks for (diagnostics, tests).
Napi::Value LibraryTable(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto o = Napi::Object::New(env);
  for (const LibSpec& spec : kSpecs) {
    auto row = Napi::Object::New(env);
    auto sonames = Napi::Array::New(env, spec.sonames.size());
    for (uint32_t i = 0; i < spec.sonames.size(); ++i) sonames.Set(i, Napi::String::New(env, spec.sonames[i]));
    auto symbols = Napi::Array::New(env, spec.symbols.size());
    for (uint32_t i = 0; i < spec.symbols.size(); ++i) symbols.Set(i, Napi::String::New(env, spec.symbols[i]));
    row.Set("sonames", sonames);
    row.Set("symbols", symbols);
    o.Set(spec.name, row);
  }
  return o;
}

}  // namespace

const char* LibName(Lib lib) { return kSpecs[static_cast<int>(lib)].name; }

const LibStatus& Probe(Lib lib) {
  Loaded& L = g_loaded[static_cast<int>(lib)];
  std::call_once(L.once, [&] { Load(lib, L); });
  return L.status;
}

void* Symbol(Lib lib, const char* name) {
  if (!Probe(lib).viable) return nullptr;
  for (const char* s : kSpecs[static_cast<int>(lib)].symbols)
    if (std::string(s) == name) return dlsym(g_loaded[static_cast<int>(lib)].handle, name);
  return nullptr;
}

void RegisterDynlib(Napi::Env env, Napi::Object exports) {
  exports.Set("capabilities", Napi::Function::New(env, Capabilities));
  exports.Set("libraryTable", Napi::Function::New(env, LibraryTable));
}

}  // namespace tprpc
