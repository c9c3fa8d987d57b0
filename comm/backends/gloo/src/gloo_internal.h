// Private to the gloo backend: its all-reduce algorithms, error mapping and the Backend
// factory shared by connect (gloo_connect.cc) and the collectives (gloo_backend.cc).
#pragma once

#include <chrono>
#include <cstddef>
#include <exception>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/device.h>
#include <memory>
#include <string_view>

#include "commkit/comm/backend.h"
#include "commkit/comm/tuning.h"

namespace commkit::comm::gloo {

// Gloo's all-reduce algorithms that commkit uses. kRing and kBcube are the new-style ::gloo::allreduce
// (out-of-place capable, per-call tag and timeout); kHalvingDoubling is the old in-place template
// ::gloo::AllreduceHalvingDoubling<T> (Debian's libgloo has no new-style halving-doubling).
enum class GlooAlgorithm { kRing, kHalvingDoubling, kBcube };
std::string_view ToString(GlooAlgorithm a);

// The selection table's all-reduce algorithm (tuning.h; the built-in rules, halving-doubling for
// small messages at power-of-two rank counts, are the gloo part of comm/src/tune) as Gloo's, and back.
GlooAlgorithm FromTable(tune::Algorithm a);
tune::Algorithm ToTable(GlooAlgorithm a);

// A Gloo exception as a Status (timeouts as kTimeout, I/O errors as kRemoteError).
Status FromGloo(const std::exception& e, std::string_view what);

// The Backend over connected contexts (`hd_context`: a second mesh for halving-doubling, or null).
std::unique_ptr<Backend> MakeGlooBackend(std::shared_ptr<::gloo::rendezvous::Context> context,
                                         std::shared_ptr<::gloo::rendezvous::Context> hd_context,
                                         std::shared_ptr<::gloo::transport::Device> device, int rank, int size,
                                         tune::Table table, std::chrono::milliseconds pair_timeout);

}  // namespace commkit::comm::gloo
