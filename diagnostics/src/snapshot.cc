#include "commkit/diagnostics/snapshot.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "commkit/common/archive.h"
#include "commkit/common/strings.h"

namespace commkit::diagnostics {
namespace {

namespace fs = std::filesystem;

bool IsArchive(const fs::path& p) {
  std::string s = p.string();
  return EndsWith(s, ".tar.gz") || EndsWith(s, ".tgz");
}

Status RunTar(const std::string& args) {
  std::string cmd = "timeout 120 tar " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return Status::SystemError("gpudoctor: cannot run tar (popen failed)");
  std::string out;
  char buf[1024];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  int rc = pclose(pipe);
  if (rc != 0) return Status::SystemError(StrCat("gpudoctor: `tar ", args, "` failed (status ", rc, "): ", Trim(out)));
  return Status::Ok();
}

}  // namespace

Result<Report> WriteSnapshot(const CheckRegistry& registry, const fs::path& out) {
  fs::path dir = out;
  std::optional<TempDir> temp;
  if (IsArchive(out)) {
    auto t = TempDir::Create("gpudoctor");
    if (!t.ok()) return t.status().WithContext("gpudoctor snapshot");
    temp.emplace(std::move(*t));
    dir = temp->path() / "snapshot";
  }
  std::shared_ptr<SystemView> live = SystemView::Live();
  COMMKIT_RETURN_IF_ERROR(live->StartCapture(dir));
  Report report = RunChecks(registry, CheckContext{live}, Selection{});
  live->StopCapture();
  if (temp) COMMKIT_RETURN_IF_ERROR(RunTar(StrCat("-czf ", ShellQuote(fs::absolute(out).string()), " -C ", ShellQuote(dir.string()), " .")));
  return report;
}

Result<std::unique_ptr<SnapshotView>> SnapshotView::Open(const fs::path& source) {
  std::unique_ptr<SnapshotView> snap(new SnapshotView());
  std::error_code ec;
  // status() reports a symlink loop in ec instead of throwing; FIFOs and devices are neither kind.
  const fs::file_status st = fs::status(source, ec);
  if (fs::is_directory(st)) {
    snap->view_ = SystemView::Replay(source);
    return snap;
  }
  if (!fs::is_regular_file(st)) {
    return Status::NotFound(StrCat("gpudoctor --from: '", source.string(), "' is neither a snapshot directory nor an archive",
                                   ec ? StrCat(" (", ec.message(), ")") : std::string()));
  }
  auto temp = TempDir::Create("gpudoctor");
  if (!temp.ok()) return temp.status().WithContext("gpudoctor --from");
  snap->temp_.emplace(std::move(*temp));
  // Extracted by commkit, not `tar`: only files, directories and symlinks, inside the directory,
  // bounded in size and count (an archive that unpacks to gigabytes is refused early).
  COMMKIT_RETURN_IF_ERROR(ExtractTarArchive(source, snap->temp_->path(), "gpudoctor --from: snapshot"));
  snap->view_ = SystemView::Replay(snap->temp_->path());
  return snap;
}

SnapshotView::~SnapshotView() { view_.reset(); }

}  // namespace commkit::diagnostics
