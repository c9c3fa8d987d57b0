// Uses only installed public headers: no third-party header may leak through them.
#include <cstdio>

#include "commkit/comm/hash_store.h"
#include "commkit/common/config.h"
#include "commkit/common/status.h"

int main() {
  commkit::HashStore store;
  if (auto s = store.Set("hello", "installed commkit"); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  auto v = store.Get("hello", std::chrono::milliseconds(1000));
  if (!v.ok()) {
    std::fprintf(stderr, "%s\n", v.status().ToString().c_str());
    return 1;
  }
  std::printf("consumer: %s (commkit %s)\n", v->c_str(), COMMKIT_VERSION_STRING);
  return *v == "installed commkit" ? 0 : 1;
}
