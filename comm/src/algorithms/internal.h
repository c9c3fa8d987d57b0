// Helpers shared by the algorithm sources (private to commkit::comm).
#pragma once

#include <initializer_list>
#include <span>
#include <string_view>
#include <vector>

#include "commkit/comm/algorithms/algorithms.h"

namespace commkit::comm::algorithms::internal {

// One step with at most one send and one receive; a peer of -1 skips that direction.
Status SendRecv(Transport& t, int to, const void* send, std::size_t send_bytes, int from, void* recv,
                std::size_t recv_bytes, Deadline deadline);

// InvalidArgument naming the collective when `choice` is not one of `allowed`.
Status CheckAlgorithm(std::string_view collective, const AlgorithmChoice& choice,
                      std::initializer_list<CollectiveAlgorithm> allowed);

// In-place or out-of-place ring reduce-scatter over `offsets`; blocks are read from `in` the first
// time and from `buf` after (in == buf: in place). See algorithms.h for the block layout.
Status RingReduceScatter(Transport& t, const Group& g, char* buf, const char* in, std::span<const std::size_t> offsets,
                         std::size_t elem_size, ReduceFunction reduce, std::size_t segment_bytes, Deadline d,
                         std::vector<char>& scratch);
Status RingAllgather(Transport& t, const Group& g, char* buf, std::span<const std::size_t> offsets, Deadline d);

Status RecursiveDoubling(Transport& t, const Group& g, const AllreduceArgs& a, Deadline d, std::vector<char>& scratch);
Status HalvingDoubling(Transport& t, const Group& g, const AllreduceArgs& a, Deadline d, std::vector<char>& scratch);

}  // namespace commkit::comm::algorithms::internal
