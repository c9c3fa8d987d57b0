// gpudoctor flight DUMP...: reads the flight recorder dumps of all ranks and says which rank stopped
// or diverged, and at which operation (diagnostics/flight_record.h). Also the Prometheus rendering of
// the node checks (gpudoctor --format prometheus).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commkit/diagnostics/check.h"

namespace gpudoctor {

struct FlightCommand {
  CLI::App* app = nullptr;
  std::vector<std::string> paths;
  bool json = false;
};

// Registers the "flight" subcommand on `app`; the returned object receives its arguments.
std::unique_ptr<FlightCommand> AddFlightCommand(CLI::App& app);
// Exit codes: 0 the ranks agree, 1 a rank stopped, diverged or is missing (or the operation failed
// or hangs on every rank), 2 unreadable or malformed dumps.
int RunFlightCommand(const FlightCommand& command, bool json);

// The check results as Prometheus text: gpudoctor_check{id,category,status} 1 per check, the number
// of checks per status, the exit code and the time of the run (docs/metrics.md).
std::string ReportToPrometheus(const commkit::diagnostics::Report& report);

}  // namespace gpudoctor
