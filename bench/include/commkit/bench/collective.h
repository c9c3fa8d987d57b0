// Benchmarked collectives: one descriptor per collective (house rule 7) holding everything the harness
// needs — how the "size" column maps to per-rank element counts, the nccl-tests bus-bandwidth factor,
// whether it reduces, has a root or an in-place form. Nothing else in the harness switches on the
// collective except the single dispatch in runner.cc.
//
// Size convention (nccl-tests, docs/PERFORMANCE.md there): `size` is the largest buffer a rank touches:
//   allreduce, broadcast, reduce, sendrecv: count = size / elem;            send = recv = count
//   allgather:      recv = size / elem (rounded down to a multiple of nranks), send = recv / nranks
//   reduce_scatter: send = size / elem (rounded down to a multiple of nranks), recv = send / nranks
//   alltoall:       send = recv = size / elem (multiple of nranks), nranks chunks of send / nranks
// algbw = size / time; busbw = algbw * factor(nranks):
//   allreduce 2(n-1)/n; allgather, reduce_scatter, alltoall (n-1)/n; broadcast, reduce, sendrecv 1.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "commkit/comm/types.h"
#include "commkit/common/status.h"

namespace commkit::bench {

enum class BenchCollective : unsigned char {
  kAllreduce,
  kAllgather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kAlltoall,
  kSendRecv,
};

std::string_view ToString(BenchCollective collective);

// Element counts of one rank's buffers for one size.
struct BufferCounts {
  std::size_t send = 0;     // elements in the send buffer
  std::size_t recv = 0;     // elements in the receive buffer
  std::size_t count = 0;    // the `count` argument passed to the collective (per-rank chunk for
                            // allgather/reduce_scatter/alltoall)
  std::size_t bytes = 0;    // the size actually measured (size rounded down to whole elements/chunks)
};

struct CollectiveDescriptor {
  BenchCollective id;
  std::string_view name;       // "allreduce", ... (also the CLI name)
  CollectiveKind kind;         // the process-group collective it exercises
  bool reduces;                // takes -o/--op
  bool rooted;                 // takes -r/--root
  bool has_in_place;           // an in-place variant exists (send buffer inside the receive buffer)
  bool has_out_of_place;       // separate send and receive buffers (broadcast has one buffer only)
  // nccl-tests bus-bandwidth factor for `nranks` ranks.
  double (*bus_factor)(int nranks);
  // Per-rank buffer counts for a requested size (bytes) and element size.
  BufferCounts (*counts)(std::size_t size_bytes, std::size_t elem_size, int nranks);
};

// All descriptors, in the order above.
std::span<const CollectiveDescriptor> AllCollectives();
const CollectiveDescriptor& Describe(BenchCollective collective);
// "allreduce", "all_reduce", "all-reduce" ... ; InvalidArgument listing the valid names otherwise.
Result<BenchCollective> ParseCollective(std::string_view name);

struct Bandwidth {
  double algbw_gbps = 0;  // GB/s (1e9 bytes per second), as nccl-tests
  double busbw_gbps = 0;
};

// algbw = bytes / seconds / 1e9, busbw = algbw * factor. Zero when seconds <= 0.
Bandwidth ComputeBandwidth(BenchCollective collective, std::size_t bytes, double seconds, int nranks);

}  // namespace commkit::bench
