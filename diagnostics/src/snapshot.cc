#include "commkit/diagnostics/snapshot.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

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

Result<fs::path> MakeTemp() {
  std::string tmpl = (fs::temp_directory_path() / "gpudoctor-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return Status::FromErrno(errno, "gpudoctor: mkdtemp");
  return fs::path(tmpl);
}

}  // namespace

Result<Report> WriteSnapshot(const CheckRegistry& registry, const fs::path& out) {
  fs::path dir = out;
  fs::path temp;
  if (IsArchive(out)) {
    COMMKIT_ASSIGN_OR_RETURN(temp, MakeTemp());
    dir = temp / "snapshot";
  }
  std::shared_ptr<SystemView> live = SystemView::Live();
  COMMKIT_RETURN_IF_ERROR(live->StartCapture(dir));
  Report report = RunChecks(registry, CheckContext{live}, Selection{});
  live->StopCapture();
  if (!temp.empty()) {
    Status st = RunTar(StrCat("-czf ", ShellQuote(fs::absolute(out).string()), " -C ", ShellQuote(dir.string()), " ."));
    std::error_code ec;
    fs::remove_all(temp, ec);
    COMMKIT_RETURN_IF_ERROR(st);
  }
  return report;
}

Result<std::unique_ptr<SnapshotView>> SnapshotView::Open(const fs::path& source) {
  std::unique_ptr<SnapshotView> snap(new SnapshotView());
  std::error_code ec;
  if (fs::is_directory(source, ec)) {
    snap->view_ = SystemView::Replay(source);
    return snap;
  }
  if (!fs::is_regular_file(source, ec))
    return Status::NotFound(StrCat("gpudoctor --from: '", source.string(), "' is neither a snapshot directory nor an archive"));
  COMMKIT_ASSIGN_OR_RETURN(snap->temp_, MakeTemp());
  COMMKIT_RETURN_IF_ERROR(RunTar(StrCat("-xzf ", ShellQuote(source.string()), " -C ", ShellQuote(snap->temp_.string()))));
  snap->view_ = SystemView::Replay(snap->temp_);
  return snap;
}

SnapshotView::~SnapshotView() {
  view_.reset();
  if (!temp_.empty()) {
    std::error_code ec;
    fs::remove_all(temp_, ec);
  }
}

}  // namespace commkit::diagnostics
