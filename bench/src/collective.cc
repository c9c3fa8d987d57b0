#include "commkit/bench/collective.h"

#include <array>
#include <string>
#include <vector>

#include "commkit/common/strings.h"

namespace commkit::bench {
namespace {

double FactorOne(int) { return 1.0; }
double FactorAllreduce(int n) { return n <= 0 ? 0.0 : 2.0 * (n - 1) / n; }
double FactorGather(int n) { return n <= 0 ? 0.0 : static_cast<double>(n - 1) / n; }

BufferCounts CountsFlat(std::size_t size, std::size_t elem, int) {
  BufferCounts c;
  c.count = size / elem;
  c.send = c.recv = c.count;
  c.bytes = c.count * elem;
  return c;
}

// Total = size / elem rounded down to a multiple of nranks.
std::size_t Total(std::size_t size, std::size_t elem, int nranks) {
  const std::size_t n = nranks > 0 ? static_cast<std::size_t>(nranks) : 1;
  return size / elem / n * n;
}

BufferCounts CountsAllgather(std::size_t size, std::size_t elem, int nranks) {
  BufferCounts c;
  c.recv = Total(size, elem, nranks);
  c.count = c.send = c.recv / static_cast<std::size_t>(nranks > 0 ? nranks : 1);
  c.bytes = c.recv * elem;
  return c;
}

BufferCounts CountsReduceScatter(std::size_t size, std::size_t elem, int nranks) {
  BufferCounts c;
  c.send = Total(size, elem, nranks);
  c.count = c.recv = c.send / static_cast<std::size_t>(nranks > 0 ? nranks : 1);
  c.bytes = c.send * elem;
  return c;
}

BufferCounts CountsAlltoall(std::size_t size, std::size_t elem, int nranks) {
  BufferCounts c;
  c.send = c.recv = Total(size, elem, nranks);
  c.count = c.send / static_cast<std::size_t>(nranks > 0 ? nranks : 1);
  c.bytes = c.send * elem;
  return c;
}

constexpr std::array<CollectiveDescriptor, 7> kDescriptors = {{
    {BenchCollective::kAllreduce, "allreduce", CollectiveKind::kAllreduce, true, false, true, true, FactorAllreduce,
     CountsFlat},
    {BenchCollective::kAllgather, "allgather", CollectiveKind::kAllgather, false, false, true, true, FactorGather,
     CountsAllgather},
    {BenchCollective::kReduceScatter, "reduce_scatter", CollectiveKind::kReduceScatter, true, false, true, true,
     FactorGather, CountsReduceScatter},
    {BenchCollective::kBroadcast, "broadcast", CollectiveKind::kBroadcast, false, true, true, false, FactorOne, CountsFlat},
    {BenchCollective::kReduce, "reduce", CollectiveKind::kReduce, true, true, true, true, FactorOne, CountsFlat},
    {BenchCollective::kAlltoall, "alltoall", CollectiveKind::kAlltoall, false, false, false, true, FactorGather,
     CountsAlltoall},
    {BenchCollective::kSendRecv, "sendrecv", CollectiveKind::kSend, false, false, false, true, FactorOne, CountsFlat},
}};

}  // namespace

std::span<const CollectiveDescriptor> AllCollectives() { return kDescriptors; }

const CollectiveDescriptor& Describe(BenchCollective collective) {
  return kDescriptors[static_cast<std::size_t>(collective)];
}

std::string_view ToString(BenchCollective collective) { return Describe(collective).name; }

Result<BenchCollective> ParseCollective(std::string_view name) {
  std::string normal;
  for (char ch : name) {
    if (ch == '-' || ch == '_') continue;
    normal += static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
  }
  std::vector<std::string> names;
  for (const auto& d : kDescriptors) {
    std::string dn;
    for (char ch : d.name) {
      if (ch != '_') dn += ch;
    }
    if (dn == normal) return d.id;
    names.emplace_back(d.name);
  }
  return Status::InvalidArgument(
      StrCat("commkit-bench: unknown collective '", name, "'; choose one of ", Join(names, ", ")));
}

Bandwidth ComputeBandwidth(BenchCollective collective, std::size_t bytes, double seconds, int nranks) {
  Bandwidth bw;
  if (seconds <= 0) return bw;
  bw.algbw_gbps = static_cast<double>(bytes) / seconds / 1e9;
  bw.busbw_gbps = bw.algbw_gbps * Describe(collective).bus_factor(nranks);
  return bw;
}

}  // namespace commkit::bench
