// The slice of UCX's UCP API that the ucx channel (channels/ucx/) calls, declared here rather than
// taken from ucp.h: the addon is built on machines (CI) without UCX, links against no UCX library,
// and reaches libucp only through dynlib's dlopen table (native/src/dynlib.cc, the one list of
// sonames and symbols; every function in Ucp below must be in its "ucx" row). Ucp is a typed view
// of that row: LoadUcp() fills it from Symbol(), or returns null with the reason when libucp is not
// viable (missing, or older than 1.10).
//
// ABI notes (UCX >= 1.10; layouts as in ucp.h / ucp_def.h): ucs_status_t and the enums are C ints;
// contexts, workers, endpoints, configs and requests are opaque pointers (void* here); a request
// pointer may carry a status instead (IsErr/PtrStatus, UCS_PTR_IS_ERR/UCS_PTR_STATUS in ucs).
// NB: UCP structs are extended at their end and read only where field_mask says so, so each
// struct below declares the fields up to the last one we set and pads the rest with zeros.
//
// Thread safety: LoadUcp() may be called from any thread (it loads once); the function pointers
// are immutable afterwards. What UCX allows on which thread is the channel's business (ucx/core.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace tprpc {
namespace channels {
namespace ucx {

using ucs_status_t = int;
using ucp_tag_t = uint64_t;
constexpr ucs_status_t UCS_OK = 0, UCS_INPROGRESS = 1, UCS_ERR_BUSY = -15, UCS_ERR_CANCELED = -16,
                       UCS_ERR_MESSAGE_TRUNCATED = -9, UCS_ERR_LAST = -100;
// The statuses by which a request may say that its peer went away.
constexpr ucs_status_t UCS_ERR_IO_ERROR = -3, UCS_ERR_UNREACHABLE = -6, UCS_ERR_CONNECTION_RESET = -25,
                       UCS_ERR_ENDPOINT_TIMEOUT = -80;
constexpr uint64_t UCP_PARAM_FIELD_FEATURES = 1ull << 0, UCP_FEATURE_TAG = 1ull << 0, UCP_FEATURE_WAKEUP = 1ull << 4;
constexpr uint64_t UCP_WORKER_PARAM_FIELD_THREAD_MODE = 1ull << 0;
constexpr int UCS_THREAD_MODE_SINGLE = 0;
constexpr uint64_t UCP_EP_PARAM_FIELD_REMOTE_ADDRESS = 1ull << 0, UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE = 1ull << 1,
                   UCP_EP_PARAM_FIELD_ERR_HANDLER = 1ull << 2;
constexpr int UCP_ERR_HANDLING_MODE_PEER = 1;
constexpr uint32_t UCP_OP_ATTR_FIELD_CALLBACK = 1u << 1, UCP_OP_ATTR_FIELD_USER_DATA = 1u << 2,
                   UCP_OP_ATTR_FIELD_FLAGS = 1u << 4, UCP_OP_ATTR_FLAG_NO_IMM_CMPL = 1u << 16;
constexpr uint32_t UCP_EP_CLOSE_FLAG_FORCE = 1u << 0;

struct ucp_params_t {
  uint64_t field_mask;
  uint64_t features;
  char rest[256];
};
struct ucp_worker_params_t {
  uint64_t field_mask;
  int thread_mode;  // UCS_THREAD_MODE_SINGLE = 0
  char rest[512];
};
using ucp_err_cb = void (*)(void* arg, void* ep, ucs_status_t status);
struct ucp_ep_params_t {
  uint64_t field_mask;
  const void* address;
  int err_mode;
  ucp_err_cb err_cb;
  void* err_arg;
  char rest[256];
};
struct ucp_tag_recv_info_t {
  ucp_tag_t sender_tag;
  size_t length;
};
using send_cb = void (*)(void* request, ucs_status_t status, void* user_data);
using recv_cb = void (*)(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data);
struct ucp_request_param_t {
  uint32_t op_attr_mask;
  uint32_t flags;
  void* request;
  union {
    send_cb send;
    recv_cb recv;
  } cb;
  uint64_t datatype;
  void* user_data;
  void* reply_buffer;
  int memory_type;
  union {
    size_t* length;
    ucp_tag_recv_info_t* tag_info;
  } recv_info;
  void* memh;
};

// Whether a request pointer returned by a *_nbx call is a status (an error) rather than a request.
inline bool IsErr(void* p) {
  return reinterpret_cast<uintptr_t>(p) >= static_cast<uintptr_t>(static_cast<intptr_t>(UCS_ERR_LAST));
}
inline ucs_status_t PtrStatus(void* p) { return static_cast<ucs_status_t>(reinterpret_cast<intptr_t>(p)); }

// The UCP functions tprpc calls (ucs_status_string is libucs's, found through libucp's handle).
struct Ucp {
  void (*get_version)(unsigned*, unsigned*, unsigned*);
  ucs_status_t (*config_read)(const char*, const char*, void**);
  ucs_status_t (*config_modify)(void*, const char*, const char*);
  void (*config_release)(void*);
  ucs_status_t (*init_version)(unsigned, unsigned, const ucp_params_t*, const void*, void**);
  void (*cleanup)(void*);
  ucs_status_t (*worker_create)(void*, const ucp_worker_params_t*, void**);
  void (*worker_destroy)(void*);
  ucs_status_t (*worker_get_address)(void*, void**, size_t*);
  void (*worker_release_address)(void*, void*);
  unsigned (*worker_progress)(void*);
  ucs_status_t (*worker_get_efd)(void*, int*);
  ucs_status_t (*worker_arm)(void*);
  ucs_status_t (*ep_create)(void*, const ucp_ep_params_t*, void**);
  void* (*ep_close_nbx)(void*, const ucp_request_param_t*);
  void* (*tag_send_nbx)(void*, const void*, size_t, ucp_tag_t, const ucp_request_param_t*);
  void* (*tag_recv_nbx)(void*, void*, size_t, ucp_tag_t, ucp_tag_t, const ucp_request_param_t*);
  ucs_status_t (*request_check_status)(void*);
  void (*request_cancel)(void*, void*);
  void (*request_free)(void*);
  const char* (*status_string)(ucs_status_t);
};

// The UCP functions, or null (and *why) when libucp is not viable.
const Ucp* LoadUcp(std::string* why);

}  // namespace ucx
}  // namespace channels
}  // namespace tprpc
