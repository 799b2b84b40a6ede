// Fills ucx_api.h's Ucp table from dynlib's "ucx" row, once. Any thread.
#include "channels/ucx_api.h"

#include "dynlib.h"

namespace tprpc {
namespace channels {
namespace ucx {

const Ucp* LoadUcp(std::string* why) {
  static Ucp ucp;
  static bool ok = [] {
    if (!Probe(Lib::Ucx).viable) return false;
    auto f = [](const char* n) { return Symbol(Lib::Ucx, n); };
#define TPRPC_UCP(field, name) ucp.field = reinterpret_cast<decltype(ucp.field)>(f(name))
    TPRPC_UCP(get_version, "ucp_get_version");
    TPRPC_UCP(config_read, "ucp_config_read");
    TPRPC_UCP(config_modify, "ucp_config_modify");
    TPRPC_UCP(config_release, "ucp_config_release");
    TPRPC_UCP(init_version, "ucp_init_version");
    TPRPC_UCP(cleanup, "ucp_cleanup");
    TPRPC_UCP(worker_create, "ucp_worker_create");
    TPRPC_UCP(worker_destroy, "ucp_worker_destroy");
    TPRPC_UCP(worker_get_address, "ucp_worker_get_address");
    TPRPC_UCP(worker_release_address, "ucp_worker_release_address");
    TPRPC_UCP(worker_progress, "ucp_worker_progress");
    TPRPC_UCP(worker_get_efd, "ucp_worker_get_efd");
    TPRPC_UCP(worker_arm, "ucp_worker_arm");
    TPRPC_UCP(ep_create, "ucp_ep_create");
    TPRPC_UCP(ep_close_nbx, "ucp_ep_close_nbx");
    TPRPC_UCP(tag_send_nbx, "ucp_tag_send_nbx");
    TPRPC_UCP(tag_recv_nbx, "ucp_tag_recv_nbx");
    TPRPC_UCP(request_check_status, "ucp_request_check_status");
    TPRPC_UCP(request_cancel, "ucp_request_cancel");
    TPRPC_UCP(request_free, "ucp_request_free");
    TPRPC_UCP(status_string, "ucs_status_string");
#undef TPRPC_UCP
    void* const* p = reinterpret_cast<void* const*>(&ucp);
    for (size_t i = 0; i < sizeof ucp / sizeof(void*); ++i)
      if (p[i] == nullptr) return false;
    return true;
  }();
  if (!ok) {
    const LibStatus& s = Probe(Lib::Ucx);
    *why = s.viable ? "libucp lacks a symbol the ucx channel needs (UCX older than 1.10?)"
                    : "ucx channel: " + s.reason;
    return nullptr;
  }
  return &ucp;
}

}  // namespace ucx
}  // namespace channels
}  // namespace tprpc
