// Waiting by polling, for stores without server-side waits (FileStore, EtcdStore).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "commkit/comm/store.h"

namespace commkit {

// Calls missing(pending) with a backoff from 1 ms to 100 ms until it returns no keys or `timeout`
// passes (then the shared StoreWaitTimeout error naming the keys still missing).
Status PollForKeys(std::string_view describe, const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                   const std::function<Result<std::vector<std::string>>(const std::vector<std::string>&)>& missing);

}  // namespace commkit
