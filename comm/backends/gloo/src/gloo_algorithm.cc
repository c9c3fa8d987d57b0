// The gloo backend's all-reduce algorithms by name and as the selection table spells them.
#include "gloo_internal.h"

namespace commkit::comm::gloo {

std::string_view ToString(GlooAlgorithm a) {
  switch (a) {
    case GlooAlgorithm::kRing: return "ring";
    case GlooAlgorithm::kHalvingDoubling: return "halving_doubling";
    case GlooAlgorithm::kBcube: return "bcube";
  }
  return "?";
}

GlooAlgorithm FromTable(tune::Algorithm a) {
  return a == tune::Algorithm::kHalvingDoubling ? GlooAlgorithm::kHalvingDoubling
         : a == tune::Algorithm::kBcube         ? GlooAlgorithm::kBcube
                                                : GlooAlgorithm::kRing;
}

tune::Algorithm ToTable(GlooAlgorithm a) {
  return a == GlooAlgorithm::kHalvingDoubling ? tune::Algorithm::kHalvingDoubling
         : a == GlooAlgorithm::kBcube         ? tune::Algorithm::kBcube
                                              : tune::Algorithm::kRing;
}

}  // namespace commkit::comm::gloo
