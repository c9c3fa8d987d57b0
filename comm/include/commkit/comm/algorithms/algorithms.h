// The collective algorithms, written once over the point-to-point Transport (transport.h) and used
// by every backend that builds collectives from messages (mpi; host between hosts). Each entry takes
// the algorithm explicitly (AlgorithmChoice): the backend, or a tuning table, decides which one runs
// at which size; these functions only run it.
//
// Every entry is collective over `group`: all of its ranks call it with the same arguments (except
// the buffers) and the same choice. Elements are reduced with `reduce` (commutative, c = a op b; AVG
// and PREMUL_SUM are the caller's scaling around a SUM). On error the collective stops where it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "commkit/comm/algorithms/transport.h"
#include "commkit/comm/reduce_kernels.h"
#include "commkit/comm/tuning.h"
#include "commkit/common/collective_algorithm.h"
#include "commkit/common/status.h"

namespace commkit::comm::algorithms {

// Which algorithm runs, with its parameters. Every rank of a collective must pass the same choice.
// Each entry below runs only the algorithms it names and returns InvalidArgument for any other.
struct AlgorithmChoice {
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kRing;
  // Ring reduce-scatter (and the ring all-reduce): each block moves in pieces of at most this many
  // bytes, each reduced while it is still in cache. 0: whole blocks.
  std::size_t segment_bytes = std::size_t{256} << 10;
};

// The selection table's all-reduce choice (tuning.h, which holds every size threshold) as this layer's:
// ring, recursive doubling or halving-doubling, with the table's segment size when it sets one. A ring
// needs at least one element per rank, so fewer elements than ranks run recursive doubling. nullopt
// for algorithms this layer does not run (the library's own, the host engine's shared-memory ones).
std::optional<AlgorithmChoice> AllreduceChoice(const tune::Choice& choice, std::size_t count, int ranks);

struct AllreduceArgs {
  void* buf = nullptr;       // every rank's result; also its input when `in` is null or equal to `buf`
  const void* in = nullptr;  // out of place: the input (not modified; must not overlap `buf`)
  std::size_t count = 0;
  std::size_t elem_size = 0;
  ReduceFunction reduce = nullptr;
};

// All-reduce by kRing, kRecursiveDoubling or kHalvingDoubling. Every rank ends with bitwise-identical
// results. `scratch` is grown as needed and kept by the caller (no fresh pages per large call).
Status Allreduce(Transport& t, const Group& group, const AllreduceArgs& args, const AlgorithmChoice& choice,
                 Deadline deadline, std::vector<char>& scratch);

// Byte offsets of `parts` near-equal blocks of `count` elements (parts + 1 entries).
std::vector<std::size_t> EvenOffsets(std::size_t count, int parts, std::size_t elem_size);
// Byte offsets of consecutive blocks of `counts[i]` elements (counts.size() + 1 entries).
std::vector<std::size_t> CountOffsets(std::span<const std::size_t> counts, std::size_t elem_size);
// The same into `off`, reusing its memory.
void CountOffsets(std::span<const std::size_t> counts, std::size_t elem_size, std::vector<std::size_t>& off);
// memcpy for blocks that may be empty (an empty block's pointer may be null) or already in place.
void CopyBytes(void* dst, const void* src, std::size_t bytes);

// Ring reduce-scatter in place (kRing): `buf` holds group.size() blocks, block i at bytes
// [offsets[i], offsets[i+1]). Afterwards position i's block i holds the reduction of every rank's
// block i (its other blocks hold partial results).
Status ReduceScatter(Transport& t, const Group& group, void* buf, std::span<const std::size_t> offsets,
                     std::size_t elem_size, ReduceFunction reduce, const AlgorithmChoice& choice, Deadline deadline,
                     std::vector<char>& scratch);

// Ring all-gather in place (kRing): position i brings block i of `buf` (offsets as above); every
// position ends with every block.
Status Allgather(Transport& t, const Group& group, void* buf, std::span<const std::size_t> offsets,
                 const AlgorithmChoice& choice, Deadline deadline);

// Binomial-tree broadcast (kBinomialTree) of `bytes` at `buf` from position `root`.
Status Broadcast(Transport& t, const Group& group, int root, void* buf, std::size_t bytes,
                 const AlgorithmChoice& choice, Deadline deadline);

// Dissemination barrier (kDissemination): ceil(log2 p) rounds of zero-byte exchanges.
Status Barrier(Transport& t, const Group& group, const AlgorithmChoice& choice, Deadline deadline);

// Pairwise all-to-all(v) (kPairwise): position q's block of `send` (bytes [send_offsets[q],
// send_offsets[q+1])) goes to position q, which receives it into its block of `recv` for this
// position. `send` must not overlap `recv` (stage an in-place input first). A rank whose own block
// sizes differ in `send_offsets` and `recv_offsets` gets InvalidArgument before anything is sent.
Status Alltoall(Transport& t, const Group& group, const void* send, std::span<const std::size_t> send_offsets,
                void* recv, std::span<const std::size_t> recv_offsets, const AlgorithmChoice& choice,
                Deadline deadline);

// Direct gather (kDirect): every position's `block_bytes` at `send` end at the root's `recv` in
// position order (the root's own block is copied unless it is already in place).
Status Gather(Transport& t, const Group& group, int root, const void* send, void* recv, std::size_t block_bytes,
              const AlgorithmChoice& choice, Deadline deadline);

// Direct scatter (kDirect): block q of the root's `send` goes to position q's `recv`.
Status Scatter(Transport& t, const Group& group, int root, const void* send, void* recv, std::size_t block_bytes,
               const AlgorithmChoice& choice, Deadline deadline);

}  // namespace commkit::comm::algorithms
