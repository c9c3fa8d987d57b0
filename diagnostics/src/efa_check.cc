// net.efa: on a node with an AWS Elastic Fabric Adapter, NCCL only uses it through libfabric's efa
// provider and the aws-ofi-nccl net plugin; without either it silently runs NET/Socket over ENA.
// Checks the device (probe's EFA NICs, PCI 1d0f:efa*), the provider (the "libfabric" fact), the plugin
// NCCL would dlopen (NCCL_NET_PLUGIN rules, loader path, the usual install dirs) and FI_/NCCL_
// variables that contradict EFA. Skips when there is no EFA device.
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "check_support.h"
#include "commkit/common/strings.h"
#include "commkit/diagnostics/check.h"
#include "commkit/topology/libfabric.h"
#include "commkit/topology/probe.h"

namespace commkit::diagnostics {
namespace {

using topology::NicKind;
using topology::NodeId;

CheckOutcome Make(CheckStatus s, std::string summary, std::vector<std::string> evidence = {}, std::string fix = "") {
  return CheckOutcome{s, std::move(summary), std::move(evidence), std::move(fix)};
}

constexpr const char* kPluginInstallDirs[] = {"/opt/amazon/ofi-nccl/lib", "/opt/amazon/ofi-nccl/lib64", "/opt/aws-ofi-nccl/lib"};
constexpr const char* kSystemLibDirs[] = {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
                                          "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/usr/lib", "/usr/local/lib"};

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

// Directories the dynamic loader searches for a bare name: LD_LIBRARY_PATH, /etc/ld.so.conf(.d), system dirs.
std::vector<std::string> LoaderDirs(const CheckContext& ctx, const std::map<std::string, std::string>& env) {
  std::vector<std::string> dirs;
  auto add = [&](std::string_view d) {
    std::string s(Trim(d));
    while (s.size() > 1 && s.back() == '/') s.pop_back();
    if (StartsWith(s, "/") && std::find(dirs.begin(), dirs.end(), s) == dirs.end()) dirs.push_back(s);
  };
  if (auto it = env.find("LD_LIBRARY_PATH"); it != env.end())
    for (const std::string& d : Split(it->second, ':', true)) add(d);
  std::vector<std::string> confs = {"/etc/ld.so.conf"};
  if (auto l = ctx.system->ListDir("/etc/ld.so.conf.d"); l.ok())
    for (const std::string& f : *l)
      if (EndsWith(f, ".conf")) confs.push_back("/etc/ld.so.conf.d/" + f);
  for (const std::string& conf : confs)
    if (auto text = ctx.system->ReadFile(conf, 64 << 10); text.ok())
      for (const std::string& line : Split(*text, '\n', true))
        if (!StartsWith(Trim(line), "#") && !StartsWith(Trim(line), "include")) add(line);
  for (const char* d : kSystemLibDirs) add(d);
  return dirs;
}

struct PluginSearch {
  std::vector<std::string> names;  // what NCCL dlopens, in order
  std::string loadable;            // dir/name NCCL would load
  std::string installed;           // a plugin library found outside the loader path (or under another name)
  std::string installed_dir;
};

PluginSearch FindPlugin(const CheckContext& ctx, const std::map<std::string, std::string>& env) {
  PluginSearch s;
  const auto it = env.find("NCCL_NET_PLUGIN");
  const std::string value = it == env.end() ? "" : it->second;
  if (value.empty()) {
    s.names = {"libnccl-net.so"};
  } else if (value.find('/') != std::string::npos) {
    s.names = {value};
    if (ctx.system->Exists(value)) s.loadable = value;
    return s;
  } else {
    s.names = {StrCat("libnccl-net-", value, ".so"), value};
  }
  const std::vector<std::string> dirs = LoaderDirs(ctx, env);
  for (const std::string& name : s.names)
    for (const std::string& d : dirs)
      if (s.loadable.empty() && ctx.system->Exists(d + "/" + name)) s.loadable = d + "/" + name;
  if (!s.loadable.empty()) return s;
  std::vector<std::string> look(dirs);
  for (const char* d : kPluginInstallDirs) look.emplace_back(d);
  for (const std::string& d : look)
    for (const char* name : {"libnccl-net.so", "libnccl-net-ofi.so", "libnccl-net-aws-ofi.so"})
      if (s.installed.empty() && ctx.system->Exists(d + "/" + name)) {
        s.installed = d + "/" + name;
        s.installed_dir = d;
      }
  return s;
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
    return Make(CheckStatus::kSkip, "no EFA device (no efa RDMA device in /sys/class/infiniband, no PCI 1d0f:efa* function)");
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

  // The aws-ofi-nccl plugin NCCL would load.
  PluginSearch plugin = FindPlugin(ctx, env);
  const auto net_plugin = env.find("NCCL_NET_PLUGIN");
  if (net_plugin != env.end()) ev.push_back("NCCL_NET_PLUGIN=" + net_plugin->second);
  if (net_plugin != env.end() && ToLower(net_plugin->second) == "none") {
    raise(CheckStatus::kFail, "NCCL_NET_PLUGIN=none disables the aws-ofi-nccl plugin: NCCL uses TCP sockets, not EFA",
          "unset NCCL_NET_PLUGIN");
  } else if (!plugin.loadable.empty()) {
    ev.push_back("NCCL net plugin: " + plugin.loadable);
  } else if (!plugin.installed.empty()) {
    ev.push_back(StrCat("NCCL looks for ", Join(plugin.names, " then "), " on the loader path; found ", plugin.installed, " instead"));
    const bool other_name = EndsWith(plugin.installed, "-ofi.so") && (net_plugin == env.end());
    raise(CheckStatus::kFail,
          StrCat("aws-ofi-nccl is installed (", plugin.installed, ") but NCCL will not load it: NCCL falls back to TCP sockets"),
          StrCat("export LD_LIBRARY_PATH=", plugin.installed_dir, ":$LD_LIBRARY_PATH", other_name ? " NCCL_NET_PLUGIN=ofi" : ""));
  } else {
    ev.push_back(StrCat("NCCL net plugin: ", Join(plugin.names, " / "), " not found on the loader path nor in ",
                        "/opt/amazon/ofi-nccl/lib, /opt/aws-ofi-nccl/lib"));
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
    return Make(CheckStatus::kPass, StrCat(devices.size(), " EFA device(s), efa provider and aws-ofi-nccl plugin in place"), ev);
  return Make(worst, Join(problems, "; "), ev, Join(fixes, "; "));
}

}  // namespace

void RegisterFabricChecks(CheckRegistry& r) {
  r.Add({{"net.efa", "EFA: device, libfabric efa provider, aws-ofi-nccl plugin, FI_/NCCL_ settings", "net"}, NetEfa});
}

}  // namespace commkit::diagnostics
