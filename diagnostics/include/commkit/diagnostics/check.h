// gpudoctor check framework: a Check reads the machine only through CheckContext (a SystemView and
// the probed topology, shared by every check of a run), and returns a CheckOutcome with evidence and
// a paste-able fix.
// Checks are registered in a CheckRegistry; RunChecks runs the selected ones (synchronously, in
// registration order) and Report renders text or JSON. Not thread-safe while registering.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "commkit/common/status.h"
#include "commkit/common/system_view.h"
#include "commkit/common/text.h"

namespace commkit::topology {
struct ProbeReport;  // commkit/topology/probe.h
}  // namespace commkit::topology

namespace commkit::diagnostics {

enum class CheckStatus { kPass, kWarn, kFail, kSkip };
const char* ToString(CheckStatus status);

// What a check reads. `system` is never null (programmer error otherwise).
// Copies share the topology cache, so a context passed around (cluster mode) still probes once.
class CheckContext {
 public:
  // Implicit: `CheckContext{SystemView::Live()}`.
  CheckContext(std::shared_ptr<SystemView> system);  // NOLINT(google-explicit-constructor)

  std::shared_ptr<SystemView> system;  // do not reassign after topology() was called

  // The machine as topology::ProbeTopology(*system) sees it (NVML and CUDA facts included): probed on
  // the first call, then the same object for every later call on this context or its copies.
  // Thread-safe (std::call_once); blocks while the first caller probes. Include
  // "commkit/topology/probe.h" to use the result. An error means the probe itself failed; missing
  // drivers or devices are ProberStatus entries inside an ok report.
  const Result<topology::ProbeReport>& topology() const;

 private:
  struct TopologyCache;
  std::shared_ptr<TopologyCache> topology_;
};

struct CheckOutcome {
  CheckStatus status = CheckStatus::kSkip;
  std::string summary;                // one line: what was found (or why skipped)
  std::vector<std::string> evidence;  // what was read and where ("/proc/self/limits: ...")
  std::string fix;                    // exact command or variable to paste; empty when passing
};

struct CheckInfo {
  std::string id;        // "shm.size"
  std::string title;     // "/dev/shm is large enough for NCCL's SHM transport"
  std::string category;  // "node", "env", "gpu", "net", "kernel", "nccl"
};

struct Check {
  CheckInfo info;
  std::function<CheckOutcome(const CheckContext&)> run;
};

class CheckRegistry {
 public:
  // Aborts (programmer error) on a duplicate id.
  void Add(Check check);
  const std::vector<Check>& checks() const { return checks_; }
  // The registry with every built-in node check.
  static CheckRegistry BuiltIn();

 private:
  std::vector<Check> checks_;
};

// Check ids and categories are selected with commkit::GlobMatch (commkit/common/text.h).
using ::commkit::GlobMatch;

struct Selection {
  // id or category globs; a glob also matches ids under it as a prefix ("shm" selects "shm.size").
  std::vector<std::string> only;  // empty = all
  std::vector<std::string> skip;
};

// The checks of `registry` that `selection` keeps, in registration order.
std::vector<const Check*> SelectChecks(const CheckRegistry& registry, const Selection& selection);

struct CheckRecord {
  CheckInfo info;
  CheckOutcome outcome;
};

struct Report {
  std::vector<CheckRecord> records;
  // 0 all pass/skip, 1 any warning, 2 any failure.
  int ExitCode() const;
  std::string ToText(bool color) const;
  std::string ToJson() const;
};

// Runs selected checks; a check that throws is recorded as a failure of the check itself.
Report RunChecks(const CheckRegistry& registry, const CheckContext& context, const Selection& selection);

// Registers the built-in node checks (shm, memlock, hostname, xid, env, driver, nccl libs, rdma...).
void RegisterNodeChecks(CheckRegistry& registry);
// Registers the topology-based checks (pci.link, p2p.acs, rdma.ports; topology_checks.cc).
void RegisterTopologyChecks(CheckRegistry& registry);
// Registers the GPU health checks from NVML facts (gpu.nvlink, gpu.ecc, gpu.clocks; gpu_checks.cc).
void RegisterGpuChecks(CheckRegistry& registry);
// Registers the fabric checks (net.efa; efa_check.cc).
void RegisterFabricChecks(CheckRegistry& registry);

}  // namespace commkit::diagnostics
