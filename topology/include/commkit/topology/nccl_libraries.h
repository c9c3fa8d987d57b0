// The NCCL libraries a host has: the core library's version(s) and the net plugins NCCL would dlopen.
// Everything is read through a SystemView, so live runs, snapshots and hand-made test trees agree.
//
// Search (one place for every caller: gpudoctor's nccl.libs and net.efa checks, its cluster facts, and
// the topology probe's net-plugin fact the advisor reads):
//  * the dynamic loader's path, in dlopen order: LD_LIBRARY_PATH, the /etc/ld.so.conf directories
//    (with their `include` globs), then glibc's system dirs: /lib/<multiarch>, /usr/lib/<multiarch>
//    (x86_64-linux-gnu, aarch64-linux-gnu), /lib, /usr/lib, /lib64, /usr/lib64;
//  * places NCCL and plugins get installed without being on that path: CUDA (/usr/local/cuda/lib64),
//    /usr/local/nccl/lib, /opt/nccl/lib, the system and multiarch lib dirs, the nvidia-nccl-cu* wheel
//    (<prefix>/lib/python3*/{site,dist}-packages/nvidia/nccl/lib, where it exists, for /usr, /usr/local,
//    VIRTUAL_ENV, CONDA_PREFIX), CONDA_PREFIX/lib, and the plugin install dirs (/opt/amazon/ofi-nccl/lib[64],
//    /opt/aws-ofi-nccl/lib, /opt/hpcx/ncclnet_plugin/lib).
// The core library scan lists large directories, so it is one SystemView
// fact, "nccl.libraries" (one absolute path per line, "path -> target" for symbolic links), scanned
// live under the view's root. A replay without that fact (a test tree, an older snapshot) scans the
// replayed tree through the view and adds the lines of an older snapshot's "nccl.libs" fact.
//
// Net plugins follow NCCL's loader (src/plugin/net.cc, plugin_open.cc, 2.28): NCCL_NET_PLUGIN unset
// means "libnccl-net.so"; "none" means no external plugin; otherwise a comma-separated list whose
// entries are each dlopen()ed as given (a path when it holds '/'), then, for a bare name that is not
// already "lib*.so", as "libnccl-net-<name>.so". Bare names resolve on the loader path only.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "commkit/common/system_view.h"

namespace commkit::topology {

// The node's environment as the SystemView fact "env" (AdvisorOptions::EnvFact's NCCL_*, FI_*,
// LD_LIBRARY_PATH, VIRTUAL_ENV, CONDA_PREFIX, ... lines): live, this process's; replayed, the captured
// one (empty when the capture has none).
std::map<std::string, std::string> NodeEnvironment(const SystemView& view);

struct NcclSearchDirs {
  std::vector<std::string> loader;  // where dlopen("name") looks, in order (deduplicated by real path)
  std::vector<std::string> other;   // install dirs the loader does not search
  std::vector<std::string> All() const;
};

// `env`: the node's environment (LD_LIBRARY_PATH, VIRTUAL_ENV, CONDA_PREFIX are used).
NcclSearchDirs FindNcclSearchDirs(const SystemView& view, const std::map<std::string, std::string>& env);

// The directories named by /etc/ld.so.conf and the files it includes, in order.
std::vector<std::string> LdSoConfDirs(const SystemView& view);

struct NcclCoreLibrary {
  std::string path;     // "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5" or "link -> target"
  std::string version;  // "2.21.5"; "2.x (version not in the file name)" when neither the name nor nccl.h tells
};

struct NcclNetPlugin {
  std::string requested;    // the NCCL_NET_PLUGIN entry (or "libnccl-net.so" by default)
  std::string path;         // what NCCL would load; empty when not found
  std::string link_target;  // as stored, when `path` is a symbolic link
  std::vector<std::string> tried;  // the names NCCL dlopen()s for this entry, in order
};

struct NcclLibraries {
  NcclSearchDirs dirs;
  std::vector<NcclCoreLibrary> core;  // one per distinct library (a link to a listed file is folded)
  std::string net_plugin_env;         // NCCL_NET_PLUGIN as set; empty when unset
  bool net_plugin_env_set = false;
  std::vector<NcclNetPlugin> net_plugins;  // one per requested entry, in NCCL's order
  // libnccl-net*.so* files NCCL would not load (off the loader path, or another name than requested).
  std::vector<std::string> unused_plugins;

  // Distinct core versions, sorted ("2.18.1", "2.21.5").
  std::vector<std::string> Versions() const;
  // The plugins NCCL would load (path found), in order.
  std::vector<const NcclNetPlugin*> Loadable() const;
};

NcclLibraries FindNcclLibraries(const SystemView& view, const std::map<std::string, std::string>& env);

// "major.minor.patch" from nccl.h text (NCCL_MAJOR/MINOR/PATCH, else NCCL_VERSION_CODE); "" if absent.
std::string NcclHeaderVersion(std::string_view header_text);

// Evidence lines for the checks (nccl.libs, net.efa): each plugin NCCL would load ("NCCL net plugin:
// <path>[ -> target] (NCCL_NET_PLUGIN=...|unset)"), or "NCCL net plugin: none (<why>): ..."; requested
// entries that are absent when another one loads; the loader path; plugin libraries NCCL would not load.
std::vector<std::string> NcclNetPluginEvidence(const NcclLibraries& libs);

// The cluster facts. nccl.version: Versions() joined with ", " ("" when no library was found).
// nccl.net_plugins: the loadable plugins as "path[ -> target]" joined with "; ", or "none", plus
// " (NCCL_NET_PLUGIN=...: tried a, b)" when the variable names something that is not there and
// "; not loaded: <files>" for plugin libraries NCCL would not pick up.
std::string NcclVersionFact(const NcclLibraries& libs);
std::string NcclNetPluginsFact(const NcclLibraries& libs);

}  // namespace commkit::topology
