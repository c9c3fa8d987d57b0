// gpudoctor cluster mode: turning gathered hosts and links into findings, text and JSON.
#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "commkit/common/escape.h"
#include "commkit/common/strings.h"
#include "commkit/diagnostics/cluster.h"

namespace commkit::diagnostics {
namespace {

using nlohmann::json;

std::string Name(const std::vector<ClusterHost>& hosts, int rank) {
  const ClusterHost& h = hosts[static_cast<std::size_t>(rank)];
  return h.host.empty() ? StrCat("rank ", rank) : StrCat(h.host, " (rank ", rank, ")");
}

std::string Names(const std::vector<ClusterHost>& hosts, const std::vector<int>& ranks) {
  std::vector<std::string> n;
  for (int r : ranks) n.push_back(Name(hosts, r));
  return Join(n, ", ");
}

int Rank(CheckStatus s) { return s == CheckStatus::kFail ? 2 : s == CheckStatus::kWarn ? 1 : 0; }

// Host names, interfaces, facts and check messages come from the other ranks (any client that
// reaches the store with the job's token): on the terminal, control bytes and invalid UTF-8 become
// visible escapes, one line per field.
std::string Safe(std::string_view remote) { return EscapeControl(remote, /*keep_newlines=*/false); }

void AddNodeFindings(ClusterReport& rep) {
  // One finding per (check, status, summary): identical problems on many hosts are reported once.
  std::map<std::tuple<std::string, int, std::string>, ClusterFinding> by;
  std::vector<std::tuple<std::string, int, std::string>> order;
  for (const ClusterHost& h : rep.hosts) {
    if (!h.arrived) continue;
    for (const CheckRecord& r : h.report.records) {
      if (Rank(r.outcome.status) == 0) continue;
      auto key = std::make_tuple(r.info.id, Rank(r.outcome.status), r.outcome.summary);
      auto [it, inserted] = by.try_emplace(key);
      if (inserted) {
        order.push_back(key);
        it->second.status = r.outcome.status;
        it->second.summary = StrCat("[", r.info.id, "] ", r.outcome.summary);
        it->second.fix = r.outcome.fix;
      }
      it->second.ranks.push_back(h.rank);
    }
  }
  for (const auto& key : order) {
    ClusterFinding f = by[key];
    f.summary = StrCat(Names(rep.hosts, f.ranks), ": ", f.summary);
    rep.findings.push_back(std::move(f));
  }
}

std::string DirOf(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

// "550.54.15" from /proc/driver/nvidia/version's first line ("NVRM version: NVIDIA UNIX x86_64 Kernel
// Module  550.54.15  Tue Mar ..."); the whole line when it has another shape.
std::string DriverVersion(const std::string& nvrm) {
  auto pos = nvrm.find("Kernel Module");
  if (pos == std::string::npos) return nvrm;
  std::vector<std::string> words = Split(nvrm.substr(pos + 13), ' ', true);
  return words.empty() ? nvrm : words.front();
}

// nccl.net_plugins: "path[ -> target]; ..." or "none[ (...)][; not loaded: a, b]".
bool NoPlugin(const std::string& value) { return value == "(unset)" || StartsWith(value, "none"); }

// A host whose NCCL loads no net plugin while the others load one (or the reverse) runs another
// network transport than its peers: connections between them fail or crawl over TCP. Different
// plugins on both sides only warn.
void NetPluginFinding(const ClusterReport& rep, const std::vector<int>& ranks, const std::string& value,
                      const std::string& majority, ClusterFinding& f) {
  const std::string names = Names(rep.hosts, ranks);
  if (value == "(unset)" || majority == "(unset)") {  // a host running a gpudoctor without this fact
    f.fix = "run the same gpudoctor version on every host";
  } else if (NoPlugin(value) && !NoPlugin(majority)) {
    f.status = CheckStatus::kFail;
    const std::string plugin(Trim(Split(majority, ';', true).front()));
    const std::string path = plugin.substr(0, plugin.find(" -> "));
    const std::string dir = DirOf(path);
    f.summary += " (NCCL there loads no net plugin, so it falls back to IB verbs or TCP sockets while the others use "
                 "the plugin's network: init fails or runs at socket speed)";
    // The plugin may be installed but off the loader path: then LD_LIBRARY_PATH is the whole fix.
    std::string off_path_dir;
    if (auto pos = value.find("not loaded: "); pos != std::string::npos)
      off_path_dir = DirOf(std::string(Trim(Split(value.substr(pos + 12), ',', true).front())));
    const bool ofi = path.find("ofi") != std::string::npos;
    if (!off_path_dir.empty())
      f.fix = StrCat("export LD_LIBRARY_PATH=", off_path_dir, ":$LD_LIBRARY_PATH   # on ", names,
                     " (the plugin is installed there but not on the loader path; or add the dir to /etc/ld.so.conf.d/ "
                     "and run ldconfig)");
    else
      f.fix = StrCat(ofi ? "install aws-ofi-nccl (the AWS EFA installer puts it in /opt/amazon/ofi-nccl)"
                         : StrCat("install the NCCL net plugin the other hosts load (", path, ")"),
                     " on ", names, ", then export LD_LIBRARY_PATH=", dir, ":$LD_LIBRARY_PATH");
    if (value.find("NCCL_NET_PLUGIN=") != std::string::npos)
      f.fix += "; and set NCCL_NET_PLUGIN as the other hosts do (it names a plugin that is not there)";
  } else if (!NoPlugin(value) && NoPlugin(majority)) {
    f.status = CheckStatus::kFail;
    f.summary += " (only these hosts load a net plugin: their NCCL uses another network transport than the others)";
    const std::string plugin(Trim(Split(value, ';', true).front()));
    f.fix = StrCat("use one network plugin everywhere: install ", plugin.substr(0, plugin.find(" -> ")),
                   " on the other hosts, or export NCCL_NET_PLUGIN=none on ", names);
  } else {
    f.fix = StrCat("install the same NCCL net plugin build on every host (the others load ", majority, ")");
  }
}

// nccl.version: every rank must run the same NCCL (the bootstrap and wire protocol change between
// versions: "ncclSocketInit: connecting to address with family 0", hangs). Unset = no libnccl found
// (NCCL linked statically into the application): named, as a warning.
void NcclVersionFinding(const ClusterReport& rep, const std::vector<int>& ranks, const std::string& value,
                        const std::string& majority, ClusterFinding& f) {
  const std::string names = Names(rep.hosts, ranks);
  if (value == "(unset)" || majority == "(unset)") {
    f.fix = StrCat("check which NCCL the job loads on ", names,
                   " (NCCL_DEBUG=VERSION prints 'NCCL version X.Y.Z'; a statically linked NCCL is not in the library paths)");
    return;
  }
  f.status = CheckStatus::kFail;
  f.summary += " (NCCL requires the same version on every rank)";
  const bool several = value.find(',') != std::string::npos;
  f.fix = StrCat("install NCCL ", majority, " on ", names,
                 several ? " and remove the other libnccl (or the extra nvidia-nccl-cu* wheel)" : "",
                 " so every host runs one version; check with NCCL_DEBUG=VERSION on every rank");
}

void AddDiffFindings(ClusterReport& rep) {
  std::set<std::string> names;
  std::vector<int> arrived;
  for (const ClusterHost& h : rep.hosts)
    if (h.arrived) {
      arrived.push_back(h.rank);
      for (const auto& [k, v] : h.facts) names.insert(k);
    }
  if (arrived.size() < 2) return;
  for (const std::string& name : names) {
    std::map<std::string, std::vector<int>> values;
    for (int r : arrived) {
      const auto& facts = rep.hosts[static_cast<std::size_t>(r)].facts;
      auto it = facts.find(name);
      values[it == facts.end() ? "(unset)" : it->second].push_back(r);
    }
    if (values.size() < 2) continue;
    rep.diff[name] = values;
    // The majority value is "expected"; the others are named.
    auto majority = std::max_element(values.begin(), values.end(),
                                     [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
    // The most common value other than `v` (what a fix should move v's hosts to when there is a tie).
    auto other = [&](const std::string& v) {
      if (v != majority->first) return majority->first;
      const std::pair<const std::string, std::vector<int>>* best = nullptr;
      for (const auto& e : values)
        if (e.first != v && (best == nullptr || e.second.size() > best->second.size())) best = &e;
      return best->first;
    };
    for (const auto& [value, ranks] : values) {
      if (value == majority->first && majority->second.size() * 2 > arrived.size()) continue;
      ClusterFinding f;
      f.ranks = ranks;
      bool mtu = name == "net.nccl_iface.mtu";
      f.status = mtu ? CheckStatus::kFail : CheckStatus::kWarn;
      f.summary = StrCat(Names(rep.hosts, ranks), ": ", name, " = '", value, "' but ", majority->second.size(), " of ",
                         arrived.size(), " hosts have '", majority->first, "'");
      if (mtu) {
        std::string iface = rep.hosts[static_cast<std::size_t>(ranks.front())].facts["net.nccl_iface"];
        f.summary += " (MTU mismatch: large frames are dropped, so NCCL hangs or times out after connecting)";
        f.fix = StrCat("ip link set dev ", iface, " mtu ", majority->first, "   # on ", Names(rep.hosts, ranks),
                       " (or make every host and switch port use one MTU)");
      } else if (StartsWith(name, "env.")) {
        f.fix = StrCat("use the same ", name.substr(4), " on every host");
      } else if (name == "net.nccl_iface") {
        f.fix = "set NCCL_SOCKET_IFNAME so every host picks the interface of the network the hosts share";
      } else if (name == "nccl.net_plugins") {
        NetPluginFinding(rep, ranks, value, other(value), f);
      } else if (name == "nccl.version") {
        NcclVersionFinding(rep, ranks, value, other(value), f);
      } else if (name == "cuda.driver_version") {
        f.summary += " (the NVIDIA driver differs: a CUDA build that needs the newer driver fails on the older hosts "
                     "with 'CUDA driver version is insufficient')";
        const auto& their = rep.hosts[static_cast<std::size_t>(values.at(other(value)).front())].facts;
        const std::string driver = DriverVersion(their.count("nvidia.driver") != 0 ? their.at("nvidia.driver") : "");
        f.fix = StrCat("install the NVIDIA driver the other hosts run (", driver.empty() ? "" : driver + ", ", "CUDA ",
                       other(value), ") on ", Names(rep.hosts, ranks), ", then reboot (or reload the nvidia modules)");
      }
      rep.findings.push_back(std::move(f));
    }
  }
}

void AddLinkFindings(ClusterReport& rep) {
  const int n = static_cast<int>(rep.hosts.size());
  std::vector<int> in_fail(n), in_total(n), out_fail(n), out_total(n);
  for (const ClusterLink& l : rep.links) {
    if (l.from < 0 || l.from >= n || l.to < 0 || l.to >= n) continue;
    ++out_total[l.from];
    ++in_total[l.to];
    if (!l.ok) ++out_fail[l.from], ++in_fail[l.to];
  }
  std::set<int> explained;
  for (int r = 0; r < n; ++r) {
    if (in_total[r] == 0 || in_fail[r] != in_total[r]) continue;
    explained.insert(r);
    const ClusterHost& h = rep.hosts[static_cast<std::size_t>(r)];
    std::string why;
    for (const ClusterLink& l : rep.links)
      if (l.to == r && !l.ok) {
        why = l.error;
        break;
      }
    ClusterFinding f;
    f.status = CheckStatus::kFail;
    f.ranks = {r};
    f.summary = StrCat(Name(rep.hosts, r), ": no other host can connect to it on ", h.iface.empty() ? "?" : h.iface,
                       " (", h.listen.empty() ? h.listen_error : h.listen, "): ", why);
    std::vector<std::string> fixes;
    // The host's own interface check knows the interface that reaches the others.
    for (const CheckRecord& rec : h.report.records)
      if (rec.info.id == "net.nccl_socket" && Rank(rec.outcome.status) > 0 && !rec.outcome.fix.empty())
        fixes.push_back(rec.outcome.fix);
    if (why.find("refused") != std::string::npos || why.find("timeout") != std::string::npos)
      fixes.push_back(StrCat("allow inbound TCP on ", h.iface, " on ", h.host,
                             " (NCCL uses ephemeral ports: e.g. iptables -I INPUT -i ", h.iface, " -p tcp -j ACCEPT)"));
    if (fixes.empty() && (why.find("no route") != std::string::npos || why.find("timeout") != std::string::npos))
      fixes.push_back(StrCat("check that ", h.iface, " is on the network the hosts share, or set NCCL_SOCKET_IFNAME "
                             "to the interface that is"));
    f.fix = Join(fixes, "; or ");
    rep.findings.push_back(std::move(f));
  }
  for (const ClusterLink& l : rep.links) {
    if (l.ok || explained.count(l.to) != 0) continue;
    ClusterFinding f;
    f.status = CheckStatus::kFail;
    f.ranks = {l.from, l.to};
    f.summary = StrCat(Name(rep.hosts, l.from), " -> ", Name(rep.hosts, l.to), ": ", l.error);
    rep.findings.push_back(std::move(f));
  }
  // Bandwidth. A slow host: the median of its links is below half the median of the links not touching
  // it (with 3 hosts a host is on 2/3 of the links, so the overall median cannot find it). Slow links:
  // links between other hosts below half the overall median.
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  std::vector<const ClusterLink*> measured;
  std::vector<double> all;
  for (const ClusterLink& l : rep.links)
    if (l.ok && l.mbytes_per_s > 0) measured.push_back(&l), all.push_back(l.mbytes_per_s);
  if (measured.size() < 2) return;
  rep.median_mbytes_per_s = median(all);
  std::set<int> slow_hosts;
  for (int r = 0; r < n; ++r) {
    std::vector<double> in, out;
    for (const ClusterLink* l : measured) (l->from == r || l->to == r ? in : out).push_back(l->mbytes_per_s);
    if (in.empty() || out.empty()) continue;
    double mi = median(in), mo = median(out);
    if (mi >= mo / 2) continue;
    slow_hosts.insert(r);
    ClusterFinding f;
    f.status = CheckStatus::kWarn;
    f.ranks = {r};
    f.summary = StrCat(Name(rep.hosts, r), " is the slow host: its links run at a median ", static_cast<int>(mi),
                       " MB/s against ", static_cast<int>(mo), " MB/s between the other hosts");
    f.fix = "check the NIC speed/duplex (ethtool), errors (ip -s link), MTU and switch port of this host";
    rep.findings.push_back(std::move(f));
  }
  std::vector<std::string> slow;
  std::vector<int> slow_ranks;
  for (const ClusterLink* l : measured) {
    if (slow_hosts.count(l->from) != 0 || slow_hosts.count(l->to) != 0) continue;
    if (l->mbytes_per_s >= rep.median_mbytes_per_s / 2) continue;
    slow.push_back(StrCat(Name(rep.hosts, l->from), " -> ", Name(rep.hosts, l->to), " ",
                          static_cast<int>(l->mbytes_per_s), " MB/s"));
    slow_ranks.push_back(l->from);
  }
  if (!slow.empty()) {
    ClusterFinding f;
    f.status = CheckStatus::kWarn;
    f.ranks = slow_ranks;
    f.summary = StrCat("slow links (below half the median ", static_cast<int>(rep.median_mbytes_per_s),
                       " MB/s): ", Join(slow, "; "));
    f.fix = "check the route, NIC and switch ports of these links (ethtool, ip -s link)";
    rep.findings.push_back(std::move(f));
  }
}

std::string Pad(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

const char* Color(CheckStatus s, bool color) {
  if (!color) return "";
  return s == CheckStatus::kFail ? "\033[31m" : s == CheckStatus::kWarn ? "\033[33m" : "\033[32m";
}

}  // namespace

ClusterReport BuildClusterReport(std::vector<ClusterHost> hosts, std::vector<ClusterLink> links) {
  ClusterReport rep;
  rep.hosts = std::move(hosts);
  rep.links = std::move(links);
  std::vector<int> missing;
  for (const ClusterHost& h : rep.hosts)
    if (!h.arrived) missing.push_back(h.rank);
  if (!missing.empty()) {
    std::vector<std::string> m;
    for (int r : missing) m.push_back(std::to_string(r));
    rep.findings.push_back({CheckStatus::kFail, missing,
                            StrCat("ranks [", Join(m, ", "), "] of ", rep.hosts.size(), " never reported (not started, ",
                                   "crashed, or cannot reach the store)"),
                            "start gpudoctor cluster on every rank with the same store and --world"});
  }
  AddLinkFindings(rep);
  AddDiffFindings(rep);
  AddNodeFindings(rep);
  std::stable_sort(rep.findings.begin(), rep.findings.end(),
                   [](const ClusterFinding& a, const ClusterFinding& b) { return Rank(a.status) > Rank(b.status); });
  return rep;
}

int ClusterReport::ExitCode() const {
  int code = 0;
  for (const ClusterFinding& f : findings) code = std::max(code, Rank(f.status));
  return code;
}

std::string ClusterReport::ToText(bool color) const {
  const char* reset = color ? "\033[0m" : "";
  std::string out;
  int fails = 0, warns = 0;
  for (const ClusterFinding& f : findings) (f.status == CheckStatus::kFail ? fails : warns) += Rank(f.status) > 0;
  out += StrCat("gpudoctor cluster: ", hosts.size(), " ranks, ", fails, " failure(s), ", warns, " warning(s)\n\n");
  out += "Hosts:\n";
  for (const ClusterHost& h : hosts) {
    if (!h.arrived) {
      out += StrCat("  rank ", h.rank, ": did not report\n");
      continue;
    }
    int c[3] = {0, 0, 0};
    for (const CheckRecord& r : h.report.records) ++c[Rank(r.outcome.status)];
    out += StrCat("  rank ", h.rank, "  ", Safe(h.host), "  iface ", h.iface.empty() ? "-" : Safe(h.iface), "  listen ",
                  h.listen.empty() ? "(" + Safe(h.listen_error) + ")" : Safe(h.listen), "  checks: ", c[0], " ok, ", c[1],
                  " warn, ", c[2], " fail\n");
  }
  out += "\nFindings:\n";
  if (findings.empty()) out += "  none: hosts agree, every pair connects\n";
  for (const ClusterFinding& f : findings) {
    out += StrCat("  ", Color(f.status, color), ToString(f.status), reset, "  ", Safe(f.summary), "\n");
    if (!f.fix.empty()) out += StrCat("        fix: ", Safe(f.fix), "\n");
  }
  if (!diff.empty()) {
    out += "\nDifferences across hosts:\n";
    for (const auto& [name, values] : diff) {
      out += StrCat("  ", Safe(name), "\n");
      for (const auto& [value, ranks] : values) {
        std::vector<std::string> rs;
        for (int r : ranks) rs.push_back(std::to_string(r));
        out += StrCat("    ranks ", Join(rs, ","), ": ", Safe(value), "\n");
      }
    }
  }
  const int n = static_cast<int>(hosts.size());
  std::map<std::pair<int, int>, const ClusterLink*> cell;
  for (const ClusterLink& l : links) cell[{l.from, l.to}] = &l;
  out += "\nTCP connectivity (row connects to column) and bandwidth (MB/s):\n       ";
  for (int c = 0; c < n; ++c) out += StrCat(Pad(StrCat("r", c), 8));
  out += "\n";
  for (int r = 0; r < n; ++r) {
    out += Pad(StrCat("  r", r), 7);
    for (int c = 0; c < n; ++c) {
      std::string v = "-";
      if (auto it = cell.find({r, c}); it != cell.end())
        v = !it->second->ok ? "FAIL" : it->second->mbytes_per_s > 0 ? std::to_string(static_cast<int>(it->second->mbytes_per_s)) : "ok";
      out += Pad(v, 8);
    }
    out += "\n";
  }
  if (median_mbytes_per_s > 0) out += StrCat("  median ", static_cast<int>(median_mbytes_per_s), " MB/s\n");
  return out;
}

// JSON keeps the other ranks' strings as they are (the writer escapes control characters as \u00XX);
// bytes that are not UTF-8 become U+FFFD instead of aborting the dump.
std::string ClusterReport::ToJson() const {
  json doc;
  doc["schema"] = "commkit.gpudoctor.cluster/1";
  doc["exit_code"] = ExitCode();
  json hs = json::array();
  for (const ClusterHost& h : hosts) {
    json rep;
    try {
      rep = json::parse(h.report.ToJson());
    } catch (const json::exception&) {  // a string that is not UTF-8: written escaped instead
      Report safe = h.report;
      for (CheckRecord& r : safe.records) {
        for (std::string* text : {&r.info.id, &r.info.title, &r.info.category, &r.outcome.summary, &r.outcome.fix})
          *text = Safe(*text);
        for (std::string& e : r.outcome.evidence) e = Safe(e);
      }
      rep = json::parse(safe.ToJson());
    }
    hs.push_back({{"rank", h.rank}, {"arrived", h.arrived}, {"host", h.host}, {"iface", h.iface},
                  {"listen", h.listen}, {"listen_error", h.listen_error}, {"facts", h.facts}, {"report", rep}});
  }
  doc["hosts"] = hs;
  json fs = json::array();
  for (const ClusterFinding& f : findings)
    fs.push_back({{"result", ToString(f.status)}, {"ranks", f.ranks}, {"summary", f.summary}, {"fix", f.fix}});
  doc["findings"] = fs;
  json d = json::object();
  for (const auto& [name, values] : diff) d[name] = values;
  doc["diff"] = d;
  json ls = json::array();
  for (const ClusterLink& l : links)
    ls.push_back({{"from", l.from}, {"to", l.to}, {"ok", l.ok}, {"error", l.error}, {"mbytes_per_s", l.mbytes_per_s}});
  doc["links"] = ls;
  doc["median_mbytes_per_s"] = median_mbytes_per_s;
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace commkit::diagnostics
