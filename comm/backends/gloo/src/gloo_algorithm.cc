// The gloo backend's all-reduce algorithms.
#include "gloo_internal.h"

namespace commkit::comm::gloo {

std::optional<CollectiveAlgorithm> GlooAllreduceAlgorithm(CollectiveAlgorithm algorithm) {
  switch (algorithm) {
    case CollectiveAlgorithm::kRing:
    case CollectiveAlgorithm::kHalvingDoubling:
    case CollectiveAlgorithm::kBcube: return algorithm;
    default: return std::nullopt;
  }
}

}  // namespace commkit::comm::gloo
