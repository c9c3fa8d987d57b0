// C10dStore: commkit's Store interface over the c10d::Store that torch.distributed.init_process_group
// hands a backend (TCPStore, FileStore, HashStore, behind torch's PrefixStore). The commkit process
// group then rendezvouses, publishes heartbeats and reports mismatches through the same store as the
// rest of the job: torchrun, env://, tcp:// and file:// work without a second store.
//
// c10d stores report failures by throwing; every call here catches and returns a Status instead
// (DistStoreError mentioning a timeout: kTimeout; anything else: kRemoteError), naming the store.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "commkit/comm/store.h"

namespace commkit::torch_ext {

class C10dStore final : public Store {
 public:
  // `what` names the store in error messages ("torch.distributed store of group 0").
  C10dStore(c10::intrusive_ptr<c10d::Store> store, std::string what);

  std::string Describe() const override { return what_; }
  Status Set(std::string_view key, std::string_view value) override;
  Result<std::string> Get(std::string_view key, std::chrono::milliseconds timeout) override;
  Result<std::int64_t> Add(std::string_view key, std::int64_t delta) override;
  Result<std::string> CompareSet(std::string_view key, std::string_view expected, std::string_view desired) override;
  Result<bool> Check(const std::vector<std::string>& keys) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  Result<bool> Delete(std::string_view key) override;
  Result<std::int64_t> NumKeys() override;
  Result<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                            std::chrono::milliseconds timeout) override;
  Status MultiSet(const std::vector<std::string>& keys, const std::vector<std::string>& values) override;

  using Store::Get;
  using Store::Wait;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  std::string what_;
};

}  // namespace commkit::torch_ext
