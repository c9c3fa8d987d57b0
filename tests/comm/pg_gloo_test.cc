#include "pg_conformance.h"

namespace commkit::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(Gloo, PgConformance, ::testing::Combine(::testing::Values("gloo"), ::testing::Range(1, 5)),
                         PgParamName);

}  // namespace
}  // namespace commkit::testing
