// gpudoctor: node health checks for NCCL/PyTorch distributed jobs, snapshots, and a log explainer.
// Exit codes: 0 all pass, 1 warnings, 2 failures, 3 usage errors (explain: 0 claim made or none needed).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include <CLI/CLI.hpp>

#include "commkit/diagnostics/check.h"
#include "commkit/diagnostics/explain.h"
#include "commkit/diagnostics/snapshot.h"

namespace dx = commkit::diagnostics;

namespace {

constexpr int kUsageError = 3;

bool UseColor(bool no_color_flag) {
  if (no_color_flag || std::getenv("NO_COLOR") != nullptr) return false;
  return isatty(STDOUT_FILENO) != 0;
}

void Print(const dx::Report& report, bool json, bool color) {
  std::cout << (json ? report.ToJson() : report.ToText(color));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpudoctor: health checks for NCCL / PyTorch distributed on this node, snapshots, log explainer"};
  app.require_subcommand(0, 1);
  bool json = false, list = false, no_color = false;
  std::vector<std::string> only, skip;
  std::string from;
  app.add_flag("--json", json, "Print the report as JSON (schema: docs/gpudoctor.md)");
  app.add_option("--only", only, "Run only checks whose id or category matches (glob, repeatable, comma-separated)")
      ->delimiter(',');
  app.add_option("--skip", skip, "Skip checks whose id or category matches (glob, repeatable, comma-separated)")
      ->delimiter(',');
  app.add_flag("--list", list, "List the checks (id, category, title) and exit");
  app.add_option("--from", from, "Replay a snapshot (directory or .tar.gz) instead of reading this machine");
  app.add_flag("--no-color", no_color, "Never color the output (also NO_COLOR)");

  CLI::App* explain = app.add_subcommand("explain", "Explain an NCCL / PyTorch log (FILE or - for stdin)");
  std::string log_file;
  explain->add_option("file", log_file, "Log file, or - for stdin")->required();
  bool explain_json = false;
  explain->add_flag("--json", explain_json, "JSON output");

  CLI::App* snapshot = app.add_subcommand("snapshot", "Capture everything the checks read into a directory or .tar.gz");
  std::string snapshot_out = "gpudoctor-snapshot.tar.gz";
  snapshot->add_option("-o,--output", snapshot_out, "Output directory or FILE.tar.gz");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kUsageError;
  }

  dx::CheckRegistry registry = dx::CheckRegistry::BuiltIn();
  if (list) {
    for (const dx::Check& c : registry.checks())
      std::cout << c.info.id << "\t" << c.info.category << "\t" << c.info.title << "\n";
    return 0;
  }

  if (explain->parsed()) {
    std::string text;
    if (log_file == "-") {
      text.assign(std::istreambuf_iterator<char>(std::cin), {});
    } else {
      std::ifstream in(log_file, std::ios::binary);
      if (!in) {
        std::cerr << "gpudoctor explain: cannot open '" << log_file << "'\n";
        return kUsageError;
      }
      text.assign(std::istreambuf_iterator<char>(in), {});
    }
    dx::Explanation ex = dx::ExplainLog(text);
    std::cout << ((explain_json || json) ? ex.ToJson() : ex.ToText());
    return 0;
  }

  if (snapshot->parsed()) {
    if (!from.empty()) {
      std::cerr << "gpudoctor snapshot: --from cannot be combined with snapshot\n";
      return kUsageError;
    }
    auto report = dx::WriteSnapshot(registry, snapshot_out);
    if (!report.ok()) {
      std::cerr << report.status().ToString() << "\n";
      return 2;
    }
    std::cerr << "gpudoctor: snapshot written to " << snapshot_out << " (replay: gpudoctor --from " << snapshot_out << ")\n";
    return 0;
  }

  dx::Selection selection{only, skip};
  if (!only.empty() && dx::SelectChecks(registry, selection).empty()) {
    std::cerr << "gpudoctor: --only selects no check (see gpudoctor --list)\n";
    return kUsageError;
  }
  if (!from.empty()) {
    auto snap = dx::SnapshotView::Open(from);
    if (!snap.ok()) {
      std::cerr << snap.status().ToString() << "\n";
      return kUsageError;
    }
    dx::Report report = dx::RunChecks(registry, dx::CheckContext{(*snap)->view()}, selection);
    Print(report, json, UseColor(no_color));
    return report.ExitCode();
  }
  dx::Report report = dx::RunChecks(registry, dx::CheckContext{commkit::SystemView::Live()}, selection);
  Print(report, json, UseColor(no_color));
  return report.ExitCode();
}
