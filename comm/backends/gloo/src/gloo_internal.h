// Private to the gloo backend: its all-reduce algorithms, error mapping and the Backend
// factory shared by connect (gloo_connect.cc) and the collectives (gloo_backend.cc).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/device.h>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "commkit/comm/backend.h"
#include "commkit/comm/reduce_kernels.h"
#include "commkit/comm/tuning.h"
#include "commkit/common/collective_algorithm.h"
#include "shm/slot_meeting.h"

namespace commkit::comm::gloo {

// `algorithm` when it is one of Gloo's all-reduce algorithms that commkit uses, else nullopt (the
// selection table gives gloo these three, and kFlat: the shared-memory meeting, see gloo_backend.cc). kRing
// and kBcube are the new-style ::gloo::allreduce (out-of-place capable, per-call tag and timeout);
// kHalvingDoubling is the old in-place template ::gloo::AllreduceHalvingDoubling<T> (Debian's libgloo
// has no new-style halving-doubling).
std::optional<CollectiveAlgorithm> GlooAllreduceAlgorithm(CollectiveAlgorithm algorithm);

// Reduce-scatter of `work` (the sum of `counts` elements of `elem_size` bytes, overwritten) in a ring
// over unbound buffers on `slot`: afterwards rank r's block (counts[r] elements after the blocks of the
// ranks before it) holds the reduction. `tmp` holds the largest block. Throws Gloo's exceptions.
void RingReduceScatter(::gloo::Context& context, char* work, char* tmp, const std::vector<std::size_t>& counts,
                       std::size_t elem_size, ReduceFunction fn, std::uint64_t slot, std::chrono::milliseconds timeout);

// A Gloo exception as a Status (timeouts as kTimeout, I/O errors as kRemoteError).
Status FromGloo(const std::exception& e, std::string_view what);

// The Backend over connected contexts (`hd_context`: a second mesh for halving-doubling, or null).
// `hd_busy_max_bytes` > 0: the halving-doubling pairs busy-poll, and larger all-reduces must not use
// them (gloo_connect.cc: HdBusyPollLimit). `meeting`: the group's ranks share a node, and every
// collective first meets there (fingerprints compared, small inputs along), or null.
std::unique_ptr<Backend> MakeGlooBackend(std::shared_ptr<::gloo::rendezvous::Context> context,
                                         std::shared_ptr<::gloo::rendezvous::Context> hd_context,
                                         std::shared_ptr<::gloo::transport::Device> device, int rank, int size,
                                         tune::Table table, std::chrono::milliseconds pair_timeout,
                                         std::size_t hd_busy_max_bytes, std::unique_ptr<SlotMeeting> meeting);

}  // namespace commkit::comm::gloo
