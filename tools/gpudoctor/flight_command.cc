#include "flight_command.h"

#include <chrono>
#include <iostream>

#include "commkit/comm/metrics.h"
#include "commkit/diagnostics/flight_record.h"

namespace dx = commkit::diagnostics;

namespace gpudoctor {

std::unique_ptr<FlightCommand> AddFlightCommand(CLI::App& app) {
  auto command = std::make_unique<FlightCommand>();
  command->app = app.add_subcommand(
      "flight",
      "Read the flight recorder dumps of all ranks (files, or directories of <group>-rank<N>.json) and say which "
      "rank stopped or diverged, and at which operation. Exit 0: the ranks agree; 1: a finding; 2: bad input");
  command->app->add_option("dumps", command->paths, "Dump files or directories")->required();
  command->app->add_flag("--json", command->json, "JSON output (schema commkit.flight_verdict/1)");
  return command;
}

int RunFlightCommand(const FlightCommand& command, bool json) {
  std::vector<std::filesystem::path> paths(command.paths.begin(), command.paths.end());
  auto loaded = dx::LoadFlightDumps(paths);
  if (!loaded.ok()) {
    std::cerr << "gpudoctor flight: " << loaded.status().ToString() << "\n";
    return 2;
  }
  dx::FlightVerdict verdict = dx::AnalyzeFlightDumps(loaded->dumps);
  verdict.warnings.insert(verdict.warnings.begin(), loaded->warnings.begin(), loaded->warnings.end());
  std::cout << ((json || command.json) ? verdict.ToJson() : verdict.ToText());
  return verdict.ExitCode();
}

std::string ReportToPrometheus(const dx::Report& report) {
  commkit::PrometheusText out;
  out.Family("gpudoctor_check", "gauge",
             "A gpudoctor node check: 1, with the check's result in the status label (pass, warn, fail, skip).");
  int counts[4] = {0, 0, 0, 0};
  for (const dx::CheckRecord& r : report.records) {
    out.Sample("gpudoctor_check",
               {{"id", r.info.id}, {"category", r.info.category}, {"status", dx::ToString(r.outcome.status)}}, 1);
    ++counts[static_cast<int>(r.outcome.status)];
  }
  out.Family("gpudoctor_checks", "gauge", "Number of gpudoctor checks per result.");
  for (dx::CheckStatus s : {dx::CheckStatus::kPass, dx::CheckStatus::kWarn, dx::CheckStatus::kFail, dx::CheckStatus::kSkip})
    out.Sample("gpudoctor_checks", {{"status", dx::ToString(s)}}, counts[static_cast<int>(s)]);
  out.Family("gpudoctor_exit_code", "gauge", "gpudoctor's exit code for this run: 0 all pass, 1 warnings, 2 failures.");
  out.Sample("gpudoctor_exit_code", {}, report.ExitCode());
  out.Family("gpudoctor_last_run_timestamp_seconds", "gauge", "Unix time at which the checks ran.");
  out.Sample("gpudoctor_last_run_timestamp_seconds", {},
             static_cast<double>(commkit::UnixNanos() / 1000000) / 1000.0);
  return out.str();
}

}  // namespace gpudoctor
