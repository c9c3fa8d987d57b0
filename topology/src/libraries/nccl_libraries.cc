// Finding the NCCL core library and the net plugins NCCL would load (see nccl_libraries.h).
#include "commkit/topology/nccl_libraries.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>
#include <regex>
#include <set>

#include "commkit/common/strings.h"
#include "commkit/common/text.h"
#include "commkit/topology/advisor.h"

namespace commkit::topology {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kFact = "nccl.libraries";
constexpr const char* kDefaultPlugin = "libnccl-net.so";

// Install dirs outside the loader path: NCCL's own and CUDA's, the system dirs the nccl.libs check
// always looks in, and where the net plugins ship (aws-ofi-nccl from the EFA installer, HPC-X).
constexpr const char* kOtherDirs[] = {
    "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib",
    "/usr/local/cuda/lib64", "/usr/local/nccl/lib", "/opt/nccl/lib",
    "/opt/amazon/ofi-nccl/lib", "/opt/amazon/ofi-nccl/lib64", "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu",
    "/opt/amazon/ofi-nccl/lib/aarch64-linux-gnu", "/opt/aws-ofi-nccl/lib", "/opt/hpcx/ncclnet_plugin/lib"};
// glibc's built-in system dirs: Debian/Ubuntu's multiarch dirs of this machine's architecture (another
// architecture's, present for cross or foreign-arch packages, are not searched), then /lib and
// /usr/lib; /lib64 and /usr/lib64 on RHEL-like systems. Those that do not exist on a host cost nothing.
#if defined(__aarch64__)
#define COMMKIT_MULTIARCH "aarch64-linux-gnu"
#elif defined(__powerpc64__)
#define COMMKIT_MULTIARCH "powerpc64le-linux-gnu"
#else
#define COMMKIT_MULTIARCH "x86_64-linux-gnu"
#endif
constexpr const char* kDefaultLoaderDirs[] = {"/lib/" COMMKIT_MULTIARCH, "/usr/lib/" COMMKIT_MULTIARCH, "/lib", "/usr/lib",
                                              "/lib64", "/usr/lib64"};
#undef COMMKIT_MULTIARCH

std::string Base(const std::string& path) { return path.substr(path.rfind('/') + 1); }
std::string DirOf(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}
std::string Normal(const std::string& path) {
  std::string s = fs::path(path).lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// Names in a machine directory. Live: read under the view's root directly, so that a capture does not
// record the listing of every library directory (the scan's result is recorded as one fact instead).
// Replay: through the view, which keeps every path inside the replayed tree.
std::vector<std::string> ListNames(const SystemView& view, const std::string& dir) {
  if (!view.live()) {
    auto l = view.ListDir(dir);
    return l.ok() ? *l : std::vector<std::string>{};
  }
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(view.root() / fs::path(dir).relative_path(), ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<std::string> LinkTarget(const SystemView& view, const std::string& path) {
  if (!view.live()) {
    auto t = view.ReadLink(path);
    return t.ok() ? std::optional<std::string>(*t) : std::nullopt;
  }
  std::error_code ec;
  fs::path host = view.root() / fs::path(path).relative_path();
  if (!fs::is_symlink(fs::symlink_status(host, ec))) return std::nullopt;
  fs::path target = fs::read_symlink(host, ec);
  return ec ? std::nullopt : std::optional<std::string>(target.string());
}

bool IsNcclFile(const std::string& name, const std::set<std::string>& extra) {
  return StartsWith(name, "libnccl.so.") || StartsWith(name, "libnccl-net") || extra.count(name) != 0;
}

// The scan: "path" or "path -> target" per NCCL file, sorted.
std::string Scan(const SystemView& view, const std::vector<std::string>& dirs, const std::set<std::string>& extra) {
  std::set<std::string> lines;
  for (const std::string& d : dirs)
    for (const std::string& name : ListNames(view, d)) {
      if (!IsNcclFile(name, extra)) continue;
      std::string path = d + "/" + name;
      auto target = LinkTarget(view, path);
      lines.insert(target ? path + " -> " + *target : path);
    }
  return Join(std::vector<std::string>(lines.begin(), lines.end()), "\n");
}

// NCCL's dlopen() names for one NCCL_NET_PLUGIN entry (plugin_open.cc).
std::vector<std::string> PluginNames(const std::string& entry) {
  std::vector<std::string> names = {entry};
  const bool lib_so = StartsWith(entry, "lib") && EndsWith(entry, ".so");
  if (entry.find('/') == std::string::npos && !lib_so) names.push_back("libnccl-net-" + entry + ".so");
  return names;
}

std::vector<std::string> RequestedPlugins(const std::map<std::string, std::string>& env, bool* set, std::string* value) {
  auto it = env.find("NCCL_NET_PLUGIN");
  *set = it != env.end();
  if (!*set) return {kDefaultPlugin};
  *value = it->second;
  if (ToLower(Trim(it->second)) == "none") return {};
  std::vector<std::string> out;
  for (const std::string& e : Split(it->second, ',', true))
    if (!Trim(e).empty()) out.emplace_back(Trim(e));
  return out;
}

}  // namespace

std::map<std::string, std::string> NodeEnvironment(const SystemView& view) {
  auto text = view.Fact("env", []() -> Result<std::string> { return AdvisorOptions::EnvFact(); });
  std::map<std::string, std::string> env;
  if (!text.ok()) return env;
  for (const std::string& line : Split(*text, '\n', true)) {
    auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

std::vector<std::string> NcclSearchDirs::All() const {
  std::vector<std::string> all = loader;
  all.insert(all.end(), other.begin(), other.end());
  return all;
}

std::vector<std::string> LdSoConfDirs(const SystemView& view) {
  std::vector<std::string> dirs;
  std::set<std::string> seen_files;
  std::function<void(const std::string&, int)> read = [&](const std::string& file, int depth) {
    if (depth > 4 || !seen_files.insert(file).second) return;
    auto text = view.ReadFile(file, 64 << 10);
    if (!text.ok()) return;
    for (std::string line : Split(*text, '\n', true)) {
      if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
      std::string_view l = Trim(line);
      if (l.empty() || StartsWith(l, "hwcap")) continue;
      if (StartsWith(l, "include") && l.size() > 7 && (l[7] == ' ' || l[7] == '\t')) {
        for (const std::string& pattern : Split(Trim(l.substr(7)), ' ', true)) {
          std::string p = StartsWith(pattern, "/") ? pattern : DirOf(file) + "/" + pattern;
          const std::string dir = DirOf(p), glob = Base(p);
          auto names = view.ListDir(dir);
          if (!names.ok()) continue;
          for (const std::string& n : *names)  // sorted, as glob(3) returns them
            if (GlobMatch(glob, n)) read(dir + "/" + n, depth + 1);
        }
        continue;
      }
      // Entries are separated by white space, ':' or ',' (ldconfig accepts all three).
      std::string entry(l);
      std::replace_if(entry.begin(), entry.end(), [](char c) { return c == ':' || c == ',' || c == '\t'; }, ' ');
      for (const std::string& d : Split(entry, ' ', true))
        if (StartsWith(d, "/")) dirs.push_back(Normal(d));
    }
  };
  read("/etc/ld.so.conf", 0);
  return dirs;
}

NcclSearchDirs FindNcclSearchDirs(const SystemView& view, const std::map<std::string, std::string>& env) {
  NcclSearchDirs out;
  std::set<std::string> seen, seen_real;
  auto add = [&](std::vector<std::string>& to, const std::string& raw) {
    if (!StartsWith(raw, "/")) return;  // relative LD_LIBRARY_PATH entries depend on the job's cwd
    std::string d = Normal(raw);
    if (!seen.insert(d).second) return;
    // /lib -> usr/lib: one directory. IsDirectory records the links on the way in a capture (RealPath
    // does not), so a replay folds the same directories.
    if (view.IsDirectory(d))
      if (auto real = view.RealPath(d); real.ok() && !seen_real.insert(Normal(*real)).second) return;
    to.push_back(d);
  };
  if (auto it = env.find("LD_LIBRARY_PATH"); it != env.end())
    for (const std::string& d : Split(it->second, ':', true)) add(out.loader, d);
  for (const std::string& d : LdSoConfDirs(view)) add(out.loader, d);
  for (const char* d : kDefaultLoaderDirs) add(out.loader, d);
  for (const char* d : kOtherDirs) add(out.other, d);
  std::vector<std::string> prefixes = {"/usr/local/lib", "/usr/lib"};
  if (auto it = env.find("VIRTUAL_ENV"); it != env.end()) prefixes.push_back(it->second + "/lib");
  if (auto it = env.find("CONDA_PREFIX"); it != env.end()) {
    add(out.other, it->second + "/lib");
    prefixes.push_back(it->second + "/lib");
  }
  // Only wheel dirs that exist (checked through the view, so a capture records them and a replay,
  // which lists only what was recorded, finds the same ones).
  for (const std::string& prefix : prefixes)
    for (const std::string& name : ListNames(view, prefix)) {
      if (!StartsWith(name, "python3")) continue;
      for (const char* site : {"site-packages", "dist-packages"})
        if (const std::string d = prefix + "/" + name + "/" + site + "/nvidia/nccl/lib"; view.IsDirectory(d)) add(out.other, d);
    }
  return out;
}

std::string NcclHeaderVersion(std::string_view header_text) {
  static const std::regex kDefine(R"(#define[ \t]+NCCL_(MAJOR|MINOR|PATCH|VERSION_CODE)[ \t]+(\d+))");
  std::map<std::string, long> parts;
  std::string text(header_text);
  for (std::sregex_iterator it(text.begin(), text.end(), kDefine), end; it != end; ++it)
    parts[(*it)[1].str()] = std::stol((*it)[2].str());
  if (parts.count("MAJOR") && parts.count("MINOR") && parts.count("PATCH"))
    return StrCat(parts["MAJOR"], ".", parts["MINOR"], ".", parts["PATCH"]);
  if (auto it = parts.find("VERSION_CODE"); it != parts.end()) {
    long c = it->second;  // NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z since 2.9
    return c >= 10000 ? StrCat(c / 10000, ".", c % 10000 / 100, ".", c % 100) : StrCat(c / 1000, ".", c % 1000 / 100, ".", c % 100);
  }
  return "";
}

std::vector<std::string> NcclLibraries::Versions() const {
  std::set<std::string> v;
  for (const NcclCoreLibrary& l : core) v.insert(l.version);
  return {v.begin(), v.end()};
}

std::vector<const NcclNetPlugin*> NcclLibraries::Loadable() const {
  std::vector<const NcclNetPlugin*> out;
  for (const NcclNetPlugin& p : net_plugins)
    if (!p.path.empty()) out.push_back(&p);
  return out;
}

NcclLibraries FindNcclLibraries(const SystemView& view, const std::map<std::string, std::string>& env) {
  NcclLibraries libs;
  libs.dirs = FindNcclSearchDirs(view, env);
  const std::vector<std::string> requested = RequestedPlugins(env, &libs.net_plugin_env_set, &libs.net_plugin_env);
  std::set<std::string> extra;  // plugin names NCCL_NET_PLUGIN asks for that the prefixes do not cover
  for (const std::string& r : requested)
    for (const std::string& n : PluginNames(r))
      if (n.find('/') == std::string::npos) extra.insert(n);

  const std::vector<std::string> dirs = libs.dirs.All();
  auto fact = view.Fact(kFact, [&]() -> Result<std::string> { return Scan(view, dirs, extra); });
  std::string listing = fact.ok() ? *fact : "";
  if (!fact.ok() && !view.live()) {
    // A replay without the fact: scan the replayed tree, and take an older snapshot's nccl.libs scan.
    listing = Scan(view, dirs, extra);
    auto old = view.Fact("nccl.libs", []() -> Result<std::string> { return Status::NotFound("replay only"); });
    if (old.ok() && !old->empty()) listing += (listing.empty() ? "" : "\n") + *old;
  }

  std::map<std::string, std::optional<std::string>> files;  // path -> link target as stored
  for (const std::string& line : Split(listing, '\n', true)) {
    auto arrow = line.find(" -> ");
    if (arrow == std::string::npos) files.try_emplace(line, std::nullopt);
    else files[line.substr(0, arrow)] = line.substr(arrow + 4);
  }
  auto resolve = [&](const std::string& path, const std::string& target) {
    return StartsWith(target, "/") ? Normal(target) : Normal(DirOf(path) + "/" + target);
  };
  // The file a path ends at after following links that stay within the listing.
  auto canonical = [&](std::string path) {
    for (int hops = 0; hops < 8; ++hops) {
      auto it = files.find(path);
      if (it == files.end() || !it->second) break;
      path = resolve(path, *it->second);
    }
    return path;
  };

  // Core library.
  static const std::regex kFull(R"(^libnccl\.so\.(\d+\.\d+\.\d+)$)");
  static const std::regex kMajor(R"(^libnccl\.so\.(\d+)$)");
  auto header_version = [&](const std::string& lib_dir) {
    std::vector<std::string> headers = {DirOf(lib_dir) + "/include/nccl.h"};
    if (StartsWith(lib_dir, "/usr/lib") || StartsWith(lib_dir, "/lib")) headers.push_back("/usr/include/nccl.h");
    for (const std::string& h : headers)
      if (auto text = view.ReadFile(h, 64 << 10); text.ok())
        if (std::string v = NcclHeaderVersion(*text); !v.empty()) return v;
    return std::string();
  };
  auto version_of = [&](const std::string& path) -> std::string {
    std::smatch m;
    const std::string name = Base(path);
    if (std::regex_match(name, m, kFull)) return m[1].str();
    if (std::regex_match(name, m, kMajor)) {
      std::string v = header_version(DirOf(path));
      return v.empty() ? m[1].str() + ".x (version not in the file name)" : v;
    }
    return "";
  };
  for (const auto& [path, target] : files) {
    if (!StartsWith(Base(path), "libnccl.so.")) continue;
    if (!target) {
      if (std::string v = version_of(path); !v.empty()) libs.core.push_back({path, v});
      continue;
    }
    // A link to a library that is listed anyway (libnccl.so.2 -> libnccl.so.2.18.1) is the same library.
    const std::string to = resolve(path, *target);
    if (files.count(to) != 0) continue;
    if (std::string v = version_of(to); !v.empty()) libs.core.push_back({path + " -> " + *target, v});
  }

  // Net plugins, in NCCL's order.
  std::set<std::string> loaded;  // canonical paths of what NCCL would load
  for (const std::string& r : requested) {
    NcclNetPlugin p;
    p.requested = r;
    p.tried = PluginNames(r);
    for (const std::string& name : p.tried) {
      if (name.find('/') != std::string::npos) {
        if (StartsWith(name, "/") && view.Exists(name)) {
          p.path = name;
          if (auto t = view.ReadLink(name); t.ok()) p.link_target = *t;
        }
      } else {
        for (const std::string& d : libs.dirs.loader) {
          auto it = files.find(d + "/" + name);
          if (it == files.end()) continue;
          p.path = it->first;
          p.link_target = it->second.value_or("");
          break;
        }
      }
      if (!p.path.empty()) break;
    }
    if (!p.path.empty()) loaded.insert(canonical(p.path));
    libs.net_plugins.push_back(std::move(p));
  }
  for (const auto& [path, target] : files)
    if (StartsWith(Base(path), "libnccl-net") && loaded.count(canonical(path)) == 0) libs.unused_plugins.push_back(path);
  return libs;
}

std::vector<std::string> NcclNetPluginEvidence(const NcclLibraries& libs) {
  std::vector<std::string> ev;
  const std::string env = libs.net_plugin_env_set ? "NCCL_NET_PLUGIN=" + libs.net_plugin_env : "NCCL_NET_PLUGIN unset";
  const std::vector<const NcclNetPlugin*> loadable = libs.Loadable();
  for (const NcclNetPlugin* p : loadable)
    ev.push_back("NCCL net plugin: " + p->path + (p->link_target.empty() ? "" : " -> " + p->link_target) + " (" + env + ")");
  if (loadable.empty()) {
    std::vector<std::string> tried;
    for (const NcclNetPlugin& p : libs.net_plugins) tried.insert(tried.end(), p.tried.begin(), p.tried.end());
    const std::string why = libs.net_plugins.empty() ? env + ": no external plugin"
                            : libs.net_plugin_env_set ? env + ": " + Join(tried, ", ") + " not found"
                                                      : env + ": libnccl-net.so is not on the loader path";
    ev.push_back("NCCL net plugin: none (" + why + "): NCCL uses its built-in IB verbs or socket transport");
  } else {
    for (const NcclNetPlugin& p : libs.net_plugins)
      if (p.path.empty()) ev.push_back("NCCL_NET_PLUGIN entry '" + p.requested + "': " + Join(p.tried, ", ") + " not found");
  }
  ev.push_back("loader path (LD_LIBRARY_PATH, /etc/ld.so.conf, system dirs): " + Join(libs.dirs.loader, " "));
  if (!libs.unused_plugins.empty())
    ev.push_back("plugin libraries NCCL would not load (off the loader path, or not a name NCCL looks for): " +
                 Join(libs.unused_plugins, ", "));
  return ev;
}

std::string NcclVersionFact(const NcclLibraries& libs) { return Join(libs.Versions(), ", "); }

std::string NcclNetPluginsFact(const NcclLibraries& libs) {
  std::vector<std::string> loadable;
  for (const NcclNetPlugin* p : libs.Loadable())
    loadable.push_back(p->link_target.empty() ? p->path : p->path + " -> " + p->link_target);
  if (!loadable.empty()) return Join(loadable, "; ");
  std::string out = "none";
  if (libs.net_plugin_env_set && libs.net_plugins.empty()) {
    out += " (NCCL_NET_PLUGIN=" + libs.net_plugin_env + ")";
  } else if (libs.net_plugin_env_set) {
    std::vector<std::string> tried;
    for (const NcclNetPlugin& p : libs.net_plugins) tried.insert(tried.end(), p.tried.begin(), p.tried.end());
    out += " (NCCL_NET_PLUGIN=" + libs.net_plugin_env + ": tried " + Join(tried, ", ") + ")";
  }
  if (!libs.unused_plugins.empty()) out += "; not loaded: " + Join(libs.unused_plugins, ", ");
  return out;
}

}  // namespace commkit::topology
