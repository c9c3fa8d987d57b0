// Argument validation and fingerprints of collective calls (private to commkit::comm).
#pragma once

#include <cstdint>
#include <string>

#include "commkit/comm/backend.h"

namespace commkit {

// InvalidArgument before any communication: null buffers with elements, sizes that overflow, roots
// or peers out of range, v-counts of the wrong length, bitwise reductions on floating types.
Status ValidateArgs(const CollectiveArgs& args, int rank, int size);

// What must agree across ranks for one call, as text ("allreduce f32 sum count=1024") and as a hash.
std::string Describe(const CollectiveArgs& args);
std::uint64_t FingerprintHash(const CollectiveArgs& args);

}  // namespace commkit
