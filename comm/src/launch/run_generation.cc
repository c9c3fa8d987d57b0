// Generations on a shared store: a later run under the same run id (a rerun with the same job id,
// torchrun's "none" id, a fixed etcd prefix or file directory) must not pass rendezvous on the
// previous run's keys with ranks missing.
//
//   gen/current          rank 0 adds 1 once per run: the newest generation
//   gen/<g>/open         rank 0's "host pid P at T world W" once generation g is ready
//   gen-<g>/rdzv/done    rank 0 sets it when every rank of g announced itself; the others finish
//                        their rendezvous only on it, so a generation's old announcements alone never
//                        complete a rendezvous
// A generation that is done, or was opened for another world size, belongs to a previous run: the
// rank waits for this run's rank 0 to open the next one. A rank that joined an older, unfinished
// generation (a previous run died part-way through its rendezvous) moves to the newer one as soon as
// rank 0 opens it.
#include <unistd.h>

#include <ctime>
#include <thread>

#include "commkit/comm/prefix_store.h"
#include "commkit/comm/rendezvous.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"

namespace commkit {

namespace {

using Clock = std::chrono::steady_clock;

Result<std::int64_t> Current(Store& store) { return store.Add("gen/current", 0); }

}  // namespace

Result<RunGeneration> JoinRunGeneration(std::shared_ptr<Store> run_store, const LaunchInfo& info,
                                        std::chrono::milliseconds timeout) {
  Store& s = *run_store;
  auto make = [&](std::int64_t g) {
    return RunGeneration{g, std::make_shared<PrefixStore>(StrCat("gen-", g), run_store)};
  };
  if (info.rank == 0) {
    COMMKIT_ASSIGN_OR_RETURN(std::int64_t g, s.Add("gen/current", 1));
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    COMMKIT_RETURN_IF_ERROR(s.Set(StrCat("gen/", g, "/open"), StrCat(host, " pid ", ::getpid(), " at ",
                                                                      static_cast<long long>(std::time(nullptr)),
                                                                      " world ", info.world_size)));
    if (g > 1) COMMKIT_LOG_INFO("rendezvous: opened generation ", g, " at ", s.Describe(), " (earlier runs used 1-", g - 1, ")");
    return make(g);
  }
  auto deadline = Clock::now() + timeout;
  const auto slice = std::chrono::milliseconds(200);
  std::int64_t stale = 0;  // the newest generation known to be used up
  std::string stale_by;
  while (true) {
    COMMKIT_ASSIGN_OR_RETURN(std::int64_t g, Current(s));
    if (g > stale) {
      auto opened = s.Get(StrCat("gen/", g, "/open"), std::min<std::chrono::milliseconds>(
                                                            slice * 10, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                            std::max(deadline - Clock::now(), Clock::duration{}))));
      if (opened.ok()) {
        auto done = s.Check({StrCat("gen-", g, "/rdzv/done")});
        if (!done.ok()) return done.status();
        auto world_at = opened->rfind(" world ");
        bool other_world = world_at != std::string::npos &&
                           opened->substr(world_at + 7) != std::to_string(info.world_size);
        if (!*done && !other_world) return make(g);
        stale = g;
        stale_by = *opened;
        COMMKIT_LOG_INFO("rendezvous: generation ", g, " at ", s.Describe(), " belongs to a previous run (rank 0 ",
                         *opened, "); waiting for this run's rank 0 to open generation ", g + 1);
        continue;
      }
      if (opened.status().code() != StatusCode::kTimeout) return opened.status();
    }
    if (Clock::now() >= deadline) {
      if (stale > 0)
        return Status::Timeout(StrCat("rendezvous: generation ", stale, " at ", s.Describe(),
                                      " belongs to a previous run (its rank 0 was ", stale_by, ") and this run's rank 0 "
                                      "did not open generation ", stale + 1, " within ",
                                      HumanSeconds(timeout.count() / 1000.0),
                                      ". Is rank 0 running and using the same store and run id (", info.run_id.empty() ? "none" : info.run_id, ")?"));
      return Status::Timeout(StrCat("rendezvous: rank 0 did not open a generation at ", s.Describe(), " within ",
                                    HumanSeconds(timeout.count() / 1000.0), ". Is rank 0 running with the same store?"));
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(slice, deadline - Clock::now()));
  }
}

}  // namespace commkit
