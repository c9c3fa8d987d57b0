// FileStore: a store in a directory on a filesystem every rank can see (a shared NFS/Lustre path for
// multi-host jobs, or /tmp on one host).
//
// Layout: one file per key, named by a 128-bit hash of the key, holding the key (checked on read) and
// the value. Set writes a temporary file and renames it into place, so readers never see a partial
// value. Read-modify-write operations (add, compare_set) hold an fcntl() lock on <dir>/.lock, which
// NFS (lockd) honours; taking it is bounded by timeout() (kTimeout naming the lock file). Waits poll with a backoff from 1 ms to 100 ms, bounded by their timeout.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "commkit/comm/store.h"

namespace commkit {

class FileStore final : public Store {
 public:
  // Creates the directory when missing. Errors name the path.
  static Result<std::unique_ptr<FileStore>> Open(const std::filesystem::path& dir);

  std::string Describe() const override;
  Status Set(std::string_view key, std::string_view value) override;
  using Store::Get;
  Result<std::string> Get(std::string_view key, std::chrono::milliseconds timeout) override;
  Result<std::int64_t> Add(std::string_view key, std::int64_t delta) override;
  Result<std::string> CompareSet(std::string_view key, std::string_view expected, std::string_view desired) override;
  Result<bool> Check(const std::vector<std::string>& keys) override;
  using Store::Wait;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  Result<bool> Delete(std::string_view key) override;
  Result<std::int64_t> NumKeys() override;
  Result<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                            std::chrono::milliseconds timeout) override;
  Status MultiSet(const std::vector<std::string>& keys, const std::vector<std::string>& values) override;

 private:
  explicit FileStore(std::filesystem::path dir) : dir_(std::move(dir)) {}
  std::filesystem::path PathFor(std::string_view key) const;
  // nullopt when absent.
  Result<std::optional<std::string>> Read(std::string_view key) const;
  Status Write(std::string_view key, std::string_view value) const;
  std::vector<std::string> Missing(const std::vector<std::string>& keys) const;

  std::filesystem::path dir_;
};

}  // namespace commkit
