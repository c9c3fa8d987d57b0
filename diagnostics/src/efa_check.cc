// net.efa: on a node with an AWS Elastic Fabric Adapter, NCCL only uses it through libfabric's efa
// provider and the aws-ofi-nccl net plugin; without either it silently runs NET/Socket over ENA.
// Checks the device (probe's EFA NICs, PCI 1d0f:efa*), the provider (the "libfabric" fact), the plugin
// NCCL would dlopen (commkit/topology/nccl_libraries.h: NCCL_NET_PLUGIN rules and order, comma lists, the loader path
// incl. ld.so.conf; aws-ofi-nccl's install dirs for a plugin NCCL would not load) and FI_/NCCL_
// variables that contradict EFA. Skips when there is no EFA device.
#include <algorithm>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <tuple>

#include "commkit/common/strings.h"
#include "commkit/diagnostics/check.h"
#include "commkit/topology/libfabric.h"
#include "commkit/topology/probe.h"
#include "commkit/topology/nccl_libraries.h"
#include "check_support.h"

namespace commkit::diagnostics {
namespace {

using topology::NicKind;
using topology::NodeId;

using internal::Outcome;

// EFA devices: RDMA NICs the probe classified as EFA, and PCI functions 1d0f:efa* (Amazon EFA).
std::vector<std::string> EfaDevices(const CheckContext& ctx, const topology::ProbeReport* rep) {
  std::set<std::string> out;
  if (rep != nullptr)
    for (NodeId id : rep->topology.Nics()) {
      const auto& n = rep->topology.node(id);
      if (n.nic.kind == NicKind::kEfa) out.insert(n.nic.name.empty() ? n.pci.bus_id : n.nic.name);
    }
  if (auto devices = ctx.system->ListDir("/sys/bus/pci/devices"); devices.ok())
    for (const std::string& d : *devices) {
      auto vendor = ctx.system->ReadAttr("/sys/bus/pci/devices/" + d + "/vendor");
      if (!vendor.ok() || *vendor != "0x1d0f") continue;
      auto device = ctx.system->ReadAttr("/sys/bus/pci/devices/" + d + "/device");
      if (device.ok() && StartsWith(ToLower(*device), "0xefa")) out.insert(StrCat("PCI ", d, " (1d0f:", device->substr(2), ")"));
    }
  return {out.begin(), out.end()};
}

// An aws-ofi-nccl library NCCL would not load (nccl_libraries' scan: off the loader path or under a
// name NCCL does not look for), and the exports that make NCCL load it.
struct InstalledPlugin {
  std::string path;
  std::string why;  // why NCCL does not load it
  std::string fix;  // "export LD_LIBRARY_PATH=<dir>:$LD_LIBRARY_PATH NCCL_NET_PLUGIN=ofi"
};

std::optional<InstalledPlugin> FindInstalledPlugin(const topology::NcclLibraries& libs) {
  static const std::regex kPluginName(R"(^libnccl-net(-(.+))?\.so$)");
  const std::vector<std::string> dirs = libs.dirs.All();
  auto dir_of = [](const std::string& p) { return p.substr(0, p.rfind('/')); };
  // aws-ofi-nccl's first, then names NCCL_NET_PLUGIN can name, then in search order.
  auto rank = [&](const std::string& p) {
    const std::string name = p.substr(p.rfind('/') + 1);
    const auto at = std::find(dirs.begin(), dirs.end(), dir_of(p)) - dirs.begin();
    return std::make_tuple(p.find("ofi") == std::string::npos, !std::regex_match(name, kPluginName), at, p);
  };
  const auto best = std::min_element(libs.unused_plugins.begin(), libs.unused_plugins.end(),
                                     [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  if (best == libs.unused_plugins.end()) return std::nullopt;
  InstalledPlugin out{*best, "", ""};
  const std::string dir = dir_of(*best), name = best->substr(best->rfind('/') + 1);
  std::smatch m;
  if (!std::regex_match(name, m, kPluginName)) {  // libnccl-net-ofi.so.1: only a path reaches it
    out.why = "NCCL dlopen()s no such name";
    out.fix = "export NCCL_NET_PLUGIN=" + *best;
    return out;
  }
  bool requested = false;
  for (const topology::NcclNetPlugin& p : libs.net_plugins)
    requested = requested || std::find(p.tried.begin(), p.tried.end(), name) != p.tried.end();
  const bool on_path = std::find(libs.dirs.loader.begin(), libs.dirs.loader.end(), dir) != libs.dirs.loader.end();
  std::vector<std::string> exports, whys;
  if (!on_path) {
    exports.push_back("LD_LIBRARY_PATH=" + dir + ":$LD_LIBRARY_PATH");
    whys.push_back(dir + " is not on the loader path");
  }
  if (!requested) {
    whys.push_back(libs.net_plugin_env_set ? "NCCL_NET_PLUGIN=" + libs.net_plugin_env + " does not name it"
                                           : "NCCL looks for libnccl-net.so");
    if (m[2].matched) exports.push_back("NCCL_NET_PLUGIN=" + m[2].str());
  }
  out.why = Join(whys, ", and ");
  out.fix = exports.empty() ? "" : "export " + Join(exports, " ");
  if (!requested && !m[2].matched) out.fix += (out.fix.empty() ? "" : "; ") + std::string("unset NCCL_NET_PLUGIN");
  return out;
}

// AWS instance families whose EFA supports RDMA read (GPUDirect RDMA over EFA), and GPU families without it.
bool RdmaReadFamily(std::string_view f) {
  for (const char* p : {"p4d", "p4de", "p5", "p5e", "p5en", "p6", "trn1", "trn1n", "trn2"})
    if (f == p) return true;
  return false;
}
bool NoRdmaReadFamily(std::string_view f) { return f == "p3dn" || f == "g4dn" || f == "g5"; }

CheckOutcome NetEfa(const CheckContext& ctx) {
  const auto& rep = ctx.topology();
  const std::vector<std::string> devices = EfaDevices(ctx, rep.ok() ? &*rep : nullptr);
  if (devices.empty())
    return Outcome(CheckStatus::kSkip, "no EFA device (no efa RDMA device in /sys/class/infiniband, no PCI 1d0f:efa* function)");
  const std::map<std::string, std::string> env = internal::NodeEnv(ctx);
  std::vector<std::string> ev = {"EFA devices: " + Join(devices, ", ")}, problems, fixes;
  CheckStatus worst = CheckStatus::kPass;
  auto raise = [&](CheckStatus s, std::string problem, std::string fix) {
    if (s == CheckStatus::kFail || worst == CheckStatus::kPass) worst = s;
    problems.push_back(std::move(problem));
    fixes.push_back(std::move(fix));
  };

  // libfabric's efa provider.
  auto fact = ctx.system->Fact("libfabric", [] { return Result<std::string>(topology::LibfabricFact("efa")); });
  auto fabric = fact.ok() ? topology::ParseLibfabricFact(*fact) : Result<topology::FabricReport>(fact.status());
  if (fabric.ok() && fabric->available && !fabric->domains.empty()) {
    std::vector<std::string> doms;
    for (const auto& d : fabric->domains) doms.push_back(StrCat(d.domain, " (", d.ep_type, ")"));
    ev.push_back(StrCat("libfabric ", fabric->version, " fi_getinfo(efa): ", Join(doms, ", ")));
  } else {
    const std::string why = !fabric.ok() ? fabric.status().message() : fabric->error.empty() ? "no efa domain" : fabric->error;
    ev.push_back("libfabric fi_getinfo(efa): " + why);
    raise(CheckStatus::kFail, "libfabric's efa provider is not usable (" + why + ")",
          "install the AWS EFA software (aws-efa-installer: libfabric with the efa provider in /opt/amazon/efa) and check "
          "`/opt/amazon/efa/bin/fi_info -p efa`");
  }
  std::vector<std::string> uverbs;
  if (rep.ok()) uverbs = rep->system.uverbs;
  ev.push_back(uverbs.empty() ? "/dev/infiniband/uverbs*: none" : "/dev/infiniband: " + Join(uverbs, " "));
  if (uverbs.empty())
    raise(CheckStatus::kFail, "no /dev/infiniband/uverbs* device: the efa provider cannot open the adapter (container without the devices?)",
          "pass the EFA devices into the container: docker run --device=/dev/infiniband/uverbs0 ... (k8s: aws-efa-k8s-device-plugin, "
          "vpc.amazonaws.com/efa resource)");

  // The aws-ofi-nccl plugin NCCL would load (NCCL_NET_PLUGIN rules and the loader path as NCCL has them).
  const topology::NcclLibraries libs = topology::FindNcclLibraries(*ctx.system, env);
  const auto net_plugin = env.find("NCCL_NET_PLUGIN");
  if (net_plugin != env.end()) ev.push_back("NCCL_NET_PLUGIN=" + net_plugin->second);
  for (std::string& line : topology::NcclNetPluginEvidence(libs)) ev.push_back(std::move(line));
  if (net_plugin != env.end() && ToLower(Trim(net_plugin->second)) == "none") {
    raise(CheckStatus::kFail, "NCCL_NET_PLUGIN=none disables the aws-ofi-nccl plugin: NCCL uses TCP sockets, not EFA",
          "unset NCCL_NET_PLUGIN");
  } else if (!libs.Loadable().empty()) {
    // NCCL loads a plugin.
  } else if (const std::optional<InstalledPlugin> installed = FindInstalledPlugin(libs)) {
    raise(CheckStatus::kFail,
          StrCat("aws-ofi-nccl is installed (", installed->path, ") but NCCL will not load it (", installed->why,
                 "): NCCL falls back to TCP sockets"),
          installed->fix);
  } else {
    ev.push_back("no libnccl-net* library in " + Join(libs.dirs.All(), " "));
    raise(CheckStatus::kFail, "EFA device without the aws-ofi-nccl NCCL plugin: NCCL uses TCP sockets over ENA (NET/Socket), not EFA",
          "install aws-ofi-nccl (the AWS EFA installer puts it in /opt/amazon/ofi-nccl; or build github.com/aws/aws-ofi-nccl) "
          "and export LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib:$LD_LIBRARY_PATH");
  }

  // Variables that contradict EFA.
  auto get = [&](const char* k) -> std::optional<std::string> {
    auto it = env.find(k);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  if (auto v = get("FI_PROVIDER")) {
    ev.push_back("FI_PROVIDER=" + *v);
    bool efa = false;
    for (const std::string& p : Split(ToLower(*v), ',', true)) efa = efa || Trim(p) == "efa";
    if (!efa || StartsWith(Trim(*v), "^"))
      raise(CheckStatus::kFail, StrCat("FI_PROVIDER=", *v, " keeps libfabric off the efa provider (TCP fallback)"), "export FI_PROVIDER=efa");
  }
  if (auto v = get("NCCL_NET")) {
    ev.push_back("NCCL_NET=" + *v);
    const std::string n = ToLower(*v);
    if (n == "socket" || n == "ib")
      raise(CheckStatus::kFail, StrCat("NCCL_NET=", *v, " forces NCCL's built-in ", *v, " transport instead of the EFA plugin"),
            "unset NCCL_NET");
  }
  std::string family;
  if (auto product = ctx.system->ReadAttr("/sys/devices/virtual/dmi/id/product_name"); product.ok()) {
    ev.push_back("/sys/devices/virtual/dmi/id/product_name: " + *product);
    if (auto dot = product->find('.'); dot != std::string::npos) family = ToLower(product->substr(0, dot));
  }
  if (auto v = get("FI_EFA_USE_DEVICE_RDMA")) {
    ev.push_back("FI_EFA_USE_DEVICE_RDMA=" + *v);
    if (*v == "0" && RdmaReadFamily(family))
      raise(CheckStatus::kWarn, StrCat("FI_EFA_USE_DEVICE_RDMA=0 on ", family, ", whose EFA supports RDMA read: GPUDirect RDMA over EFA is off"),
            "unset FI_EFA_USE_DEVICE_RDMA (or export FI_EFA_USE_DEVICE_RDMA=1)");
    if (*v == "1" && NoRdmaReadFamily(family))
      raise(CheckStatus::kWarn, StrCat("FI_EFA_USE_DEVICE_RDMA=1 on ", family, ", whose EFA has no RDMA read: the efa provider fails to open"),
            "unset FI_EFA_USE_DEVICE_RDMA");
  }
  if (auto v = get("NCCL_PROTO")) {
    ev.push_back("NCCL_PROTO=" + *v);
    std::string p = ToLower(Trim(*v));
    const bool exclude = StartsWith(p, "^");
    if (exclude) p = p.substr(1);
    bool simple = false, ll128 = false;
    for (const std::string& x : Split(p, ',', true)) {
      simple = simple || Trim(x) == "simple";
      ll128 = ll128 || Trim(x) == "ll128";
    }
    if (exclude ? simple : !simple)
      raise(CheckStatus::kWarn, StrCat("NCCL_PROTO=", *v, " excludes the Simple protocol: large messages over EFA lose most of their bandwidth"),
            "unset NCCL_PROTO");
    else if (!exclude && ll128)
      raise(CheckStatus::kWarn, StrCat("NCCL_PROTO=", *v, " forces LL128, which NCCL enables only where it is known safe: "
                                       "forcing it over the network can corrupt data"),
            "unset NCCL_PROTO (or NCCL_PROTO=Simple for the old aws-ofi-nccl advice)");
  }
  if (worst == CheckStatus::kPass)
    return Outcome(CheckStatus::kPass, StrCat(devices.size(), " EFA device(s), efa provider and aws-ofi-nccl plugin in place"), ev);
  return Outcome(worst, Join(problems, "; "), ev, Join(fixes, "; "));
}

}  // namespace

void RegisterFabricChecks(CheckRegistry& r) {
  r.Add({{"net.efa", "EFA: device, libfabric efa provider, aws-ofi-nccl plugin, FI_/NCCL_ settings", "net"}, NetEfa});
}

}  // namespace commkit::diagnostics
