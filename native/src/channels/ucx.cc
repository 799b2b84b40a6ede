// UCX channel (unfinished placeholder while shm and cma land): registers nothing yet.
#include "channels/common.h"

namespace tprpc {
namespace channels {
void RegisterUcx(Napi::Env, Napi::Object) {}
}  // namespace channels
}  // namespace tprpc
