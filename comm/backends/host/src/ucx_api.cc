#include "ucx_api.h"

#include "commkit/common/dynamic_library.h"

namespace commkit::comm::host {

namespace {

constexpr OptionalLibrary kLibucp{"libucp.so.0", "COMMKIT_LIBUCP",
                                  "install UCX (libucx0 on Debian/Ubuntu, ucx on RHEL) or use the gloo or mpi backend "
                                  "for groups that span hosts; ranks that share one host need no UCX"};

Result<const UcxApi*> Load() {
  COMMKIT_ASSIGN_OR_RETURN(DynamicLibrary lib, OpenOptionalLibrary(kLibucp));
  static UcxApi api;
  Status s;
  auto bind = [&](auto& function, const char* name) {
    if (s.ok()) s = lib.Bind(function, name);
  };
  bind(api.config_read, "ucp_config_read");
  bind(api.config_modify, "ucp_config_modify");
  bind(api.config_release, "ucp_config_release");
  bind(api.init_version, "ucp_init_version");
  bind(api.cleanup, "ucp_cleanup");
  bind(api.worker_create, "ucp_worker_create");
  bind(api.worker_destroy, "ucp_worker_destroy");
  bind(api.worker_get_address, "ucp_worker_get_address");
  bind(api.worker_release_address, "ucp_worker_release_address");
  bind(api.worker_progress, "ucp_worker_progress");
  bind(api.ep_create, "ucp_ep_create");
  bind(api.ep_close_nbx, "ucp_ep_close_nbx");
  bind(api.tag_send_nbx, "ucp_tag_send_nbx");
  bind(api.tag_recv_nbx, "ucp_tag_recv_nbx");
  bind(api.tag_recv_request_test, "ucp_tag_recv_request_test");
  bind(api.request_check_status, "ucp_request_check_status");
  bind(api.request_cancel, "ucp_request_cancel");
  bind(api.request_free, "ucp_request_free");
  bind(api.status_string, "ucs_status_string");
  if (!s.ok()) return MissingSymbol(kLibucp, s);
  // UCX keeps its transports (libuct_*) and memory hooks loaded for the life of the process.
  lib.Leak();
  return &api;
}

}  // namespace

Result<const UcxApi*> LoadUcx() {
  static const Result<const UcxApi*> loaded = Load();
  return loaded;
}

}  // namespace commkit::comm::host
