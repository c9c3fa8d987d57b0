// commkit-topo: probe, show, export and advise on this machine's GPU/NIC topology.
//
//   commkit-topo show [--json]                 devices, NICs, interfaces, prober status
//   commkit-topo matrix                        nvidia-smi topo -m style matrix
//   commkit-topo export --format nccl-xml|nvsmi|json|dot|svg [-o FILE]
//   commkit-topo advise [--format shell|env|json] [--master-addr A]
//   commkit-topo capture DIR|FILE.tar.gz       save exactly what the probes read
//   commkit-topo plan [--backend host,gloo,mpi] [--ranks 2] [--nodes 1] [--collective allreduce] [--json]
//                                              which algorithm runs at each size and why (docs/tuning.md)
//   commkit-topo cores [--cpus 0,1,...] [--round-trips N] [--json]
//                                              core-to-core round-trip latency between CPUs
//   --from DIR|FILE.tar.gz|TOPOLOGY_FILE       replay a capture, or import a topology file
// Exit codes: 0 ok; 1 usage error; 2 input could not be read/imported; 3 output could not be written;
// 4 advise found a user setting that contradicts the machine.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "commkit/common/config.h"
#include "commkit/common/archive.h"
#include "commkit/common/file_io.h"
#include "commkit/common/escape.h"
#include "commkit/common/strings.h"
#include "commkit/common/system_view.h"
#include "commkit/topology/advisor.h"
#include "commkit/topology/export.h"
#include "commkit/topology/hwloc.h"
#include "commkit/topology/import.h"
#include "commkit/topology/json.h"
#include "commkit/topology/probe.h"
#include "cores.h"
#include "plan.h"

extern char** environ;

namespace fs = std::filesystem;
using namespace commkit;
using namespace commkit::topology;

namespace {

constexpr int kUsage = 1, kInput = 2, kOutput = 3, kConflict = 4;

int RunTar(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawnp(&pid, "tar", nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int st = 0;
  if (waitpid(pid, &st, 0) < 0) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

bool IsTarGz(const std::string& p) { return EndsWith(p, ".tar.gz") || EndsWith(p, ".tgz"); }

nlohmann::json ReportJson(const ProbeReport& r) {
  using json = nlohmann::json;
  json j;
  j["hostname"] = r.topology.metadata().hostname;
  j["gpus"] = json::array();
  for (NodeId id : r.topology.Gpus()) {
    const Node& n = r.topology.node(id);
    j["gpus"].push_back({{"index", n.gpu.index}, {"name", n.gpu.name}, {"bus_id", n.pci.bus_id},
                         {"pcie_gen", n.pci.link.gen}, {"pcie_width", n.pci.link.width}, {"numa", r.topology.node(r.topology.CpuOf(id) == kNoNode ? id : r.topology.CpuOf(id)).cpu.numa_id}});
  }
  j["nics"] = json::array();
  for (NodeId id : r.topology.Nics()) {
    const Node& n = r.topology.node(id);
    json ports = json::array();
    for (const auto& p : n.nic.ports) ports.push_back({{"port", p.port}, {"state", p.state}, {"link_layer", p.link_layer}, {"gbps", p.speed_gbps}});
    j["nics"].push_back({{"name", n.nic.name}, {"kind", ToString(n.nic.kind)}, {"bus_id", n.pci.bus_id}, {"netdevs", n.nic.netdevs}, {"ports", ports}});
  }
  j["interfaces"] = json::array();
  for (const auto& i : r.network.interfaces) {
    json addrs = json::array();
    for (const auto& a : i.addresses) addrs.push_back(StrCat(a.address, "/", a.prefix_len));
    j["interfaces"].push_back({{"name", i.name}, {"up", i.up}, {"operstate", i.operstate}, {"virtual", i.is_virtual},
                               {"speed_mbps", i.speed_mbps.value_or(-1)}, {"mtu", i.mtu}, {"pci", i.pci_address}, {"addresses", addrs}});
  }
  j["gids"] = json::array();
  for (const auto& g : r.gids) j["gids"].push_back({{"device", g.device}, {"port", g.port}, {"index", g.index}, {"gid", g.gid}, {"type", g.type}, {"ndev", g.ndev}});
  j["system"] = {{"hypervisor", r.system.hypervisor}, {"pci_tree_flat", r.system.pci_tree_flat}, {"iommu_present", r.system.iommu_present},
                 {"iommu_passthrough", r.system.iommu_passthrough}, {"acs_enabled_bridges", r.system.acs_enabled_bridges},
                 {"nvswitch", r.system.nvswitch_present}, {"efa", r.system.efa_present}, {"nvidia_peermem", r.system.nvidia_peermem},
                 {"uverbs", r.system.uverbs}, {"cpu_vendor", r.system.cpu_vendor}, {"cpu_model", r.system.cpu_model},
                 {"packages", r.system.packages}, {"numa_unknown", r.system.numa_unknown}, {"hwloc_version", r.system.hwloc_version}};
  j["numa"] = json::array();
  for (const auto& n : r.numa)
    j["numa"].push_back({{"os_index", n.os_index}, {"package", n.package}, {"cpulist", n.cpulist}, {"memory_bytes", n.memory_bytes},
                         {"source", n.source}});
  j["locality"] = json::array();
  for (const auto& l : r.locality)
    j["locality"].push_back({{"bus_id", l.bus_id}, {"label", l.label}, {"numa", l.numa_id}, {"cpulist", l.cpulist}, {"source", l.source}});
  j["driver_version"] = r.gpu.driver_version;
  j["probers"] = json::array();
  for (const auto& p : r.probers) j["probers"].push_back({{"name", p.name}, {"state", ToString(p.state)}, {"detail", p.detail}});
  j["warnings"] = r.warnings;
  return j;
}

void PrintShow(const ProbeReport& r, std::ostream& out) {
  out << "host: " << (r.topology.metadata().hostname.empty() ? "?" : r.topology.metadata().hostname) << "\n";
  if (r.topology.GpuCount() == 0) {
    const ProberStatus* nv = r.Prober("nvml");
    std::string why = nv && nv->state != ProberState::kOk ? nv->detail : "none found";
    if (StartsWith(why, "skipped: ")) why = why.substr(9);
    out << "GPUs: no GPU (" << why << ")\n";
  } else {
    out << "GPUs: " << r.topology.GpuCount() << "\n";
    for (NodeId id : r.topology.Gpus()) {
      const Node& n = r.topology.node(id);
      // 0 = not reported (a VM's sysfs, NCCL's link_width="0", nvidia-smi text): "?", not "gen0 x0".
      auto known = [](int v) { return v > 0 ? std::to_string(v) : std::string("?"); };
      out << "  " << n.label << "  " << n.gpu.name << "  " << n.pci.bus_id << "  PCIe gen" << known(n.pci.link.gen)
          << " x" << known(n.pci.link.width) << "\n";
    }
  }
  out << "NICs:\n";
  for (NodeId id : r.topology.Nics()) {
    const Node& n = r.topology.node(id);
    out << "  " << n.nic.name << "  " << ToString(n.nic.kind) << "  " << n.pci.bus_id << "  "
              << (n.nic.SpeedGbps() > 0 ? StrCat(n.nic.SpeedGbps(), " Gb/s") : std::string("speed unknown"))
              << (n.nic.netdevs.empty() ? "" : "  netdev " + Join(n.nic.netdevs, ",")) << "\n";
  }
  if (!r.numa.empty()) {
    out << "NUMA:" << (r.system.packages > 0 ? StrCat(" ", r.system.packages, " package(s)") : "") << "\n";
    for (const auto& n : r.numa) {
      out << "  node" << n.os_index << (n.package >= 0 ? StrCat("  package ", n.package) : "") << "  CPUs "
                << (n.cpulist.empty() ? "?" : n.cpulist)
                << (n.memory_bytes ? "  " + HumanBytes(static_cast<double>(n.memory_bytes)) : "") << "  (" << n.source << ")\n";
    }
  }
  if (!r.locality.empty()) {
    out << "device locality:\n";
    for (const auto& l : r.locality) {
      out << "  " << l.label << "  " << l.bus_id << "  "
                << (l.numa_id >= 0 ? StrCat("NUMA ", l.numa_id, "  CPUs ", l.cpulist.empty() ? "?" : l.cpulist, "  (", l.source, ")")
                                   : std::string("NUMA unknown (sysfs numa_node -1, hwloc could not tell)"))
                << "\n";
    }
  }
  out << "interfaces:\n";
  for (const auto& i : r.network.interfaces) {
    std::vector<std::string> addrs;
    for (const auto& a : i.addresses) addrs.push_back(StrCat(a.address, "/", a.prefix_len));
    out << "  " << i.name << "  " << (i.up ? "up" : i.operstate) << (i.loopback ? " loopback" : i.is_virtual ? " virtual" : "")
              << (i.speed_mbps ? StrCat(" ", *i.speed_mbps, " Mb/s") : "") << " mtu " << i.mtu << "  " << Join(addrs, " ") << "\n";
  }
  auto pick = PredictNcclSocketInterfaces(r.network, NcclSocketOptions::FromEnvironment());
  out << "NCCL socket interface: " << (pick.found() ? pick.selected[0].ifname + " " + pick.selected[0].address : "none")
            << "  (rule " << pick.rule << ")\n";
  for (const auto& p : r.probers) {
    // Details often repeat the state ("skipped: no libnvidia-ml"); print it once.
    std::string state(ToString(p.state)), detail = p.detail;
    if (StartsWith(detail, state + ": ")) detail = detail.substr(state.size() + 2);
    else if (detail == state) detail.clear();
    out << "prober " << p.name << ": " << state << (detail.empty() ? "" : " - " + detail) << "\n";
  }
  for (const auto& w : r.warnings) out << "warning: " << w << "\n";
}

// `--from lstopo.xml`: NUMA nodes, packages and device locality from the file, without changing the
// imported topology (the merge runs on a scratch copy).
void AddHwlocLocality(const fs::path& path, ProbeReport& report) {
  auto read = ReadRegularFile(path, 64u << 20, "topology file");
  if (!read.ok()) return;  // ImportTopologyFile read it a moment ago; nothing to add
  const std::string& text = *read;
  // A commkit JSON exported from an hwloc import keeps source "hwloc-xml" but is not hwloc XML.
  if (DetectTopologyFormat(text) != TopologyFormat::kHwlocXml) return;
  ProbeReport scratch;
  scratch.topology = report.topology;
  if (auto m = MergeHwloc(text, scratch, path.string()); !m.ok()) {
    report.warnings.push_back(StrCat("hwloc locality: ", m.status().message()));
    return;
  }
  report.numa = std::move(scratch.numa);
  report.locality = std::move(scratch.locality);
  for (auto& l : report.locality)
    if (auto id = report.topology.FindByBusId(l.bus_id)) l.label = report.topology.node(*id).label;
  report.system.packages = scratch.system.packages;
  report.system.hwloc_version = scratch.system.hwloc_version;
}

bool WriteOut(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::cout << text;
    return true;
  }
  std::ofstream out(path, std::ios::binary);
  out << text;
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"commkit-topo: GPU/NIC topology of this machine, NCCL environment advice"};
  app.require_subcommand(1);
  std::string from;
  app.add_option("--from", from,
                 "replay a capture directory/.tar.gz, or import a topology file (NCCL XML, hwloc XML, nvidia-smi topo -m/-p2p, "
                 "commkit topology JSON from `export --format json`)");
  bool json_out = false;
  auto* show = app.add_subcommand("show", "devices, NICs, interfaces and prober status");
  show->add_flag("--json", json_out, "machine-readable output");
  auto* matrix = app.add_subcommand("matrix", "GPU/NIC path matrix (nvidia-smi topo -m style)");
  std::string format = "nccl-xml", out_path;
  auto* exp = app.add_subcommand("export", "write the topology in another format");
  exp->add_option("--format", format, "nccl-xml | nvsmi | json (commkit topology schema, docs/topology-json.md; re-imports with --from) | "
                  "dot (Graphviz) | svg (self-contained drawing)")
      ->check(CLI::IsMember({"nccl-xml", "nvsmi", "json", "dot", "svg"}));
  exp->add_option("-o,--output", out_path, "output file (default stdout)");
  std::string advise_format = "shell", master;
  auto* adv = app.add_subcommand("advise", "recommended NCCL/libfabric environment with reasons");
  adv->add_option("--format", advise_format, "shell | env | json")->check(CLI::IsMember({"shell", "env", "json"}));
  adv->add_option("--master-addr", master, "IP of MASTER_ADDR (default: $MASTER_ADDR)");
  std::string capture_to;
  auto* cap = app.add_subcommand("capture", "save exactly what the probes read, for --from replay");
  cap->add_option("DEST", capture_to, "directory or FILE.tar.gz")->required();
  TopoPlanArgs plan_args;
  auto* plan = app.add_subcommand("plan", "which algorithm each backend runs at each size, and why (docs/tuning.md)");
  plan->add_option("--backend", plan_args.backends, "backends (host, gloo, mpi)")->delimiter(',');
  plan->add_option("--collective", plan_args.collective, "collective")->capture_default_str();
  plan->add_option("--ranks", plan_args.ranks, "ranks in the group")->capture_default_str();
  plan->add_option("--nodes", plan_args.nodes, "nodes the ranks are on")->capture_default_str();
  plan->add_option("--ppn", plan_args.ranks_per_node, "most ranks on one node (default: ranks / nodes)");
  plan->add_option("-b,--min-bytes", plan_args.min_size, "smallest size")->capture_default_str();
  plan->add_option("-e,--max-bytes", plan_args.max_size, "largest size")->capture_default_str();
  plan->add_flag("--json", plan_args.json, "machine-readable output");
  TopoCoresArgs cores_args;
  auto* cores = app.add_subcommand("cores", "core-to-core round-trip latency between CPUs (measured now; ignores --from)");
  cores->add_option("--cpus", cores_args.cpus, "CPUs to measure between (default: all this process may use)")
      ->delimiter(',');
  cores->add_option("--round-trips", cores_args.round_trips, "round trips per batch")->capture_default_str();
  cores->add_flag("--json", cores_args.json, "machine-readable output");
  app.set_version_flag("--version", std::string(COMMKIT_VERSION_STRING));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints and exits 0; every other parse error is a usage error (documented exit code 1,
    // not CLI11's own codes).
    return app.exit(e) == 0 ? 0 : kUsage;
  }

  // A measurement of the CPUs, not of the probed topology: no probe needed.
  if (cores->parsed()) return RunTopoCores(cores_args);

  std::optional<ProbeReport> report;
  std::optional<TempDir> extracted;              // a .tar.gz capture, removed on every way out
  std::shared_ptr<SystemView> replay;            // the capture being replayed, for its recorded facts
  if (!from.empty()) {
    fs::path src = from;
    if (IsTarGz(from)) {
      auto dir = TempDir::Create("commkit-topo");
      if (!dir.ok()) {
        std::cerr << "commkit-topo: " << dir.status().message() << "\n";
        return kInput;
      }
      extracted.emplace(std::move(*dir));
      if (Status s = ExtractTarArchive(from, extracted->path(), "capture"); !s.ok()) {
        std::cerr << "commkit-topo: " << s.message() << "\n";
        return kInput;
      }
      src = extracted->path();
    }
    // status() follows symlinks without throwing: a loop or a dangling link is reported, not fatal.
    std::error_code ec;
    const fs::file_status st = fs::status(src, ec);
    if (ec && ec != std::errc::no_such_file_or_directory) {
      std::cerr << "commkit-topo: --from " << src.string() << ": " << ec.message() << "\n";
      return kInput;
    }
    if (fs::is_directory(st)) {
      replay = SystemView::Replay(src);
      auto r = ProbeTopology(*replay);
      if (!r.ok()) {
        std::cerr << "commkit-topo: " << r.status().ToString() << "\n";
        return kInput;
      }
      report = std::move(*r);
    } else {
      auto t = ImportTopologyFile(src);
      if (!t.ok()) {
        std::cerr << "commkit-topo: " << t.status().ToString() << "\n";
        return kInput;
      }
      report.emplace();
      report->topology = std::move(*t);
      if (report->topology.metadata().source == TopologySource::kHwlocXml) AddHwlocLocality(src, *report);
    }
  }
  if (cap->parsed()) {
    if (!from.empty()) {
      std::cerr << "commkit-topo: capture reads this machine; it cannot be combined with --from\n";
      return kUsage;
    }
    std::optional<TempDir> staging;
    fs::path dir = capture_to;
    if (IsTarGz(capture_to)) {
      auto t = TempDir::Create("commkit-topo-cap");
      if (!t.ok()) {
        std::cerr << "commkit-topo: " << t.status().message() << "\n";
        return kOutput;
      }
      staging.emplace(std::move(*t));
      dir = staging->path();
    }
    auto live = SystemView::Live();
    if (Status s = live->StartCapture(dir); !s.ok()) {
      std::cerr << "commkit-topo: " << s.ToString() << "\n";
      return kOutput;
    }
    auto r = ProbeTopology(*live);
    // The settings the advice is checked against on replay (same fact as gpudoctor snapshots).
    (void)live->Fact("env", [] { return Result<std::string>(AdvisorOptions::EnvFact()); });
    live->StopCapture();
    if (IsTarGz(capture_to)) {
      int rc = RunTar({"tar", "-czf", capture_to, "-C", dir.string(), "."});
      if (rc != 0) {
        std::cerr << "commkit-topo: tar failed writing " << capture_to << "\n";
        return kOutput;
      }
    }
    std::cout << "captured to " << capture_to << (r.ok() ? "" : " (probe: " + r.status().ToString() + ")") << "\n";
    return 0;
  }
  if (!report) {
    auto r = ProbeTopology(*SystemView::Live());
    if (!r.ok()) {
      std::cerr << "commkit-topo: " << r.status().ToString() << "\n";
      return kInput;
    }
    report = std::move(*r);
  }
  int rc = 0;
  if (show->parsed()) {
    // Names and details come from the machine or a capture: escape what a terminal would act on.
    if (json_out) {
      std::cout << ReportJson(*report).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      std::ostringstream text;
      PrintShow(*report, text);
      std::cout << EscapeControl(text.str());
    }
  } else if (plan->parsed()) {
    rc = RunTopoPlan(plan_args, *report);
  } else if (matrix->parsed()) {
    std::cout << EscapeControl(ExportNvsmiMatrix(report->topology));
  } else if (exp->parsed()) {
    std::string text;
    if (format == "nccl-xml") {
      auto xml = ExportNcclXml(report->topology);
      if (!xml.ok()) {
        std::cerr << "commkit-topo: " << EscapeControl(xml.status().message()) << "\n";
        return kOutput;
      }
      text = std::move(*xml);
    }
    if (format != "nccl-xml")
      text = format == "nvsmi"  ? ExportNvsmiMatrix(report->topology)
                       : format == "dot"    ? ExportDot(report->topology)
                       : format == "svg"    ? ExportSvg(report->topology)
                                            : ExportJson(report->topology) + "\n";  // docs/topology-json.md
    if (!WriteOut(out_path, text)) {
      std::cerr << "commkit-topo: cannot write " << out_path << "\n";
      rc = kOutput;
    }
  } else if (adv->parsed()) {
    // A replayed capture is checked against the environment recorded with it, not this shell's.
    AdvisorOptions opts;
    std::string env_note;
    if (replay) {
      auto env = replay->Fact("env", []() -> Result<std::string> { return Status::NotFound("replay only"); });
      if (env.ok()) {
        opts = AdvisorOptions::FromEnvFact(*env);
        env_note = StrCat("user settings checked: the environment recorded in the capture (", opts.env.size(), " NCCL_/FI_ variable(s))");
      } else {
        env_note = StrCat("the capture records no environment (", env.status().message(),
                          "): your NCCL_/FI_ settings on that machine are not checked");
      }
    } else {
      opts = AdvisorOptions::FromEnvironment();
    }
    if (!master.empty()) opts.master_addr = master;
    Advice a = Advise(*report, opts);
    if (!env_note.empty()) a.findings.push_back(env_note);
    std::cout << (advise_format == "json" ? a.ToJson() + "\n" : advise_format == "env" ? a.ToEnvFile() : a.ToShell());
    for (const auto& s : a.settings)
      if (s.conflict) rc = kConflict;
  }
  return rc;
}
