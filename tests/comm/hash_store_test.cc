#include "commkit/comm/hash_store.h"

#include "store_contract.h"

namespace commkit::testing {
namespace {

StoreInstance MakeHashStore() {
  auto store = std::make_shared<HashStore>();
  return {store, store, nullptr};
}

INSTANTIATE_TEST_SUITE_P(Hash, StoreContract, ::testing::Values(StoreFactory{"hash", &MakeHashStore}),
                         PrintStoreFactory);

}  // namespace
}  // namespace commkit::testing
