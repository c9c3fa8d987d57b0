// UCX's ucp API, loaded at run time: a commkit built with UCX still starts (and runs every rank of a
// group that shares one host) on a node without libucp; only a group spanning hosts needs it, and it
// then fails with "libucp.so.0 not available: <why>; <what to install>". The header is used at build
// time for the types and macros; every call goes through this table. Private to the host backend.
#pragma once

#include <ucp/api/ucp.h>

#include "commkit/common/status.h"

namespace commkit::comm::host {

struct UcxApi {
  decltype(&::ucp_config_read) config_read = nullptr;
  decltype(&::ucp_config_modify) config_modify = nullptr;
  decltype(&::ucp_config_release) config_release = nullptr;
  decltype(&::ucp_init_version) init_version = nullptr;  // what the inline ucp_init() calls
  decltype(&::ucp_cleanup) cleanup = nullptr;
  decltype(&::ucp_worker_create) worker_create = nullptr;
  decltype(&::ucp_worker_destroy) worker_destroy = nullptr;
  decltype(&::ucp_worker_get_address) worker_get_address = nullptr;
  decltype(&::ucp_worker_release_address) worker_release_address = nullptr;
  decltype(&::ucp_worker_progress) worker_progress = nullptr;
  decltype(&::ucp_ep_create) ep_create = nullptr;
  decltype(&::ucp_ep_close_nbx) ep_close_nbx = nullptr;
  decltype(&::ucp_tag_send_nbx) tag_send_nbx = nullptr;
  decltype(&::ucp_tag_recv_nbx) tag_recv_nbx = nullptr;
  decltype(&::ucp_tag_recv_request_test) tag_recv_request_test = nullptr;
  decltype(&::ucp_request_check_status) request_check_status = nullptr;
  decltype(&::ucp_request_cancel) request_cancel = nullptr;
  decltype(&::ucp_request_free) request_free = nullptr;
  decltype(&::ucs_status_string) status_string = nullptr;  // libucs, a dependency of libucp

  ucs_status_t Init(const ucp_params_t* params, const ucp_config_t* config, ucp_context_h* context) const {
    return init_version(UCP_API_MAJOR, UCP_API_MINOR, params, config, context);
  }
};

// Loads libucp.so.0 (COMMKIT_LIBUCP names another file) and binds the table, once per process; the
// library stays loaded. Unavailable when it is absent or lacks a function.
Result<const UcxApi*> LoadUcx();

}  // namespace commkit::comm::host
