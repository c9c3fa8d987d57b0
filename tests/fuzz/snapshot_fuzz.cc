// libFuzzer target: what a replayed snapshot/capture hands to its readers. Byte 0 picks the input:
//   0..N-1  a recorded fact (name from the table below): schema check, then its parser when valid
//   N       the bytes as a snapshot archive (.tar.gz or .tar) extracted into a private TempDir
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#include "commkit/common/archive.h"
#include "commkit/common/fact_schema.h"
#include "commkit/common/file_io.h"
#include "commkit/topology/hwloc.h"
#include "commkit/topology/libfabric.h"
#include "commkit/topology/netif.h"
#include "commkit/topology/probe.h"
#include "commkit/topology/verbs.h"

namespace {

constexpr const char* kFacts[] = {"env", "statvfs.dev_shm", "rlimit.memlock", "hostname", "hostname.addresses",
                                  "dlopen.nvml", "systemctl.nvidia-fabricmanager", "nvml", "cuda", "hwloc",
                                  "verbs", "libfabric", "getifaddrs", "dmesg"};
constexpr std::size_t kNumFacts = sizeof(kFacts) / sizeof(kFacts[0]);

void Fact(std::string_view name, std::string_view value) {
  using namespace commkit::topology;
  if (!commkit::ValidateFact(name, value).ok()) return;
  GpuRuntimeInfo gpu;
  HwlocSnapshot hwloc;
  if (name == "nvml") (void)ParseNvmlFact(value, gpu);
  if (name == "cuda") (void)ParseCudaFact(value, gpu);
  if (name == "hwloc") (void)ParseHwlocStatus(value, hwloc);
  if (name == "verbs") (void)ParseVerbsFact(value);
  if (name == "libfabric") (void)ParseLibfabricFact(value);
  if (name == "getifaddrs") (void)ParseIfaddrsFact(value);
}

void Archive(std::string_view bytes) {
  static commkit::TempDir* work = [] {
    auto t = commkit::TempDir::Create("snapshot-fuzz");
    if (!t.ok()) std::abort();
    return new commkit::TempDir(std::move(*t));
  }();
  const auto file = work->path() / "in.tar.gz";
  std::ofstream(file, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  auto out = commkit::TempDir::Create("snapshot-fuzz-out");
  if (!out.ok()) std::abort();
  commkit::ArchiveLimits limits;
  limits.max_total_bytes = 8 << 20;  // the fuzzer's memory, not a snapshot's real bound
  limits.max_member_bytes = 4 << 20;
  (void)commkit::ExtractTarArchive(file, out->path(), "fuzz", limits);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::size_t pick = data[0] % (kNumFacts + 1);
  if (pick < kNumFacts) Fact(kFacts[pick], rest);
  else Archive(rest);
  return 0;
}
