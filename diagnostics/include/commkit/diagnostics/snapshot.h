// gpudoctor snapshots: everything the checks read (files, listings, links and facts) captured into a
// directory or a .tar.gz, replayable offline with identical results (SystemView capture/replay).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "commkit/common/file_io.h"
#include "commkit/common/status.h"
#include "commkit/common/system_view.h"
#include "commkit/diagnostics/check.h"

namespace commkit::diagnostics {

// Runs every check of `registry` on a live view that captures into `out` (a directory, or a file
// name ending in .tar.gz / .tgz, written with the `tar` command). Returns the report of that run.
Result<Report> WriteSnapshot(const CheckRegistry& registry, const std::filesystem::path& out);

// A replay view over a snapshot directory or archive. Archives are extracted (ExtractTarArchive:
// bounded, files/directories/symlinks only) into a private TempDir removed when the object dies,
// also when opening fails.
class SnapshotView {
 public:
  static Result<std::unique_ptr<SnapshotView>> Open(const std::filesystem::path& source);
  ~SnapshotView();
  SnapshotView(const SnapshotView&) = delete;
  SnapshotView& operator=(const SnapshotView&) = delete;
  const std::shared_ptr<SystemView>& view() const { return view_; }

 private:
  SnapshotView() = default;
  std::shared_ptr<SystemView> view_;
  std::optional<TempDir> temp_;  // extraction dir of an archive; none for directories
};

}  // namespace commkit::diagnostics
