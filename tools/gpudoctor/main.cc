// gpudoctor: node health checks for NCCL/PyTorch distributed jobs, snapshots, and a log explainer.
// Exit codes: 0 all pass, 1 warnings, 2 failures, 3 usage errors (explain: 0 claim made or none needed).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commkit/common/config.h"
#include "commkit/comm/rendezvous.h"
#include "commkit/comm/tcp_store.h"
#include "commkit/diagnostics/check.h"
#include "commkit/diagnostics/cluster.h"
#include "commkit/common/file_io.h"
#include "commkit/common/escape.h"
#include "commkit/common/host_port.h"
#include "commkit/common/strings.h"
#include "commkit/diagnostics/explain.h"
#include "commkit/diagnostics/flight_record.h"
#include "commkit/diagnostics/local_bench.h"
#include "commkit/diagnostics/snapshot.h"
#include "flight_command.h"

namespace dx = commkit::diagnostics;

namespace {

constexpr int kUsageError = 3;

bool UseColor(bool no_color_flag) {
  if (no_color_flag || std::getenv("NO_COLOR") != nullptr) return false;
  return isatty(STDOUT_FILENO) != 0;
}

// Check results quote what they read (file contents, snapshot facts, command output). A snapshot
// from elsewhere may hold escape sequences or invalid UTF-8: they are escaped before printing, in
// text, JSON and Prometheus alike and with or without colour (colour codes are added after this).
dx::Report Sanitized(dx::Report report) {
  for (dx::CheckRecord& r : report.records) {
    r.outcome.summary = commkit::EscapeControl(r.outcome.summary, /*keep_newlines=*/false);
    for (std::string& e : r.outcome.evidence) e = commkit::EscapeControl(e, /*keep_newlines=*/false);
    r.outcome.fix = commkit::EscapeControl(r.outcome.fix, /*keep_newlines=*/false);
  }
  return report;
}

void Print(const dx::Report& report, bool json, bool color, bool prometheus = false) {
  const dx::Report safe = Sanitized(report);
  std::cout << (prometheus ? gpudoctor::ReportToPrometheus(safe) : json ? safe.ToJson() : safe.ToText(color));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpudoctor: health checks for NCCL / PyTorch distributed on this node, snapshots, log explainer"};
  app.require_subcommand(0, 1);
  bool json = false, list = false, no_color = false;
  std::vector<std::string> only, skip;
  std::string from;
  app.add_flag("--json", json, "Print the report as JSON (schema: docs/gpudoctor.md)");
  std::string format = "text";
  app.add_option("--format", format, "text, json (as --json) or prometheus (gauges for node_exporter: docs/metrics.md)")
      ->check(CLI::IsMember({"text", "json", "prometheus"}));
  app.add_option("--only", only, "Run only checks whose id or category matches (glob, repeatable, comma-separated)")
      ->delimiter(',');
  app.add_option("--skip", skip, "Skip checks whose id or category matches (glob, repeatable, comma-separated)")
      ->delimiter(',');
  app.add_flag("--list", list, "List the checks (id, category, title) and exit");
  app.add_option("--from", from, "Replay a snapshot (directory or .tar.gz) instead of reading this machine");
  app.add_flag("--no-color", no_color, "Never color the output (also NO_COLOR)");
  bool bench = false;
  app.add_flag("--bench", bench,
               "After the checks, a short local all-reduce (2 ranks as threads; host then gloo; 1 KiB..16 MiB; "
               "a few seconds) with busbw next to the topology cost model's prediction");

  CLI::App* explain = app.add_subcommand(
      "explain",
      "Explain NCCL / CUDA / PyTorch failure logs: ranked causes with evidence, fix and how to confirm. Several "
      "FILEs (one per rank or host, e.g. rank*.log) are compared to find the rank that diverged");
  std::vector<std::string> log_files;
  explain->add_option("files", log_files, "Log files (one per rank/host, or one interleaved log), or - for stdin")
      ->required();
  bool explain_json = false;
  explain->add_flag("--json", explain_json, "JSON output");

  auto flight = gpudoctor::AddFlightCommand(app);

  CLI::App* snapshot = app.add_subcommand("snapshot", "Capture everything the checks read into a directory or .tar.gz");
  std::string snapshot_out = "gpudoctor-snapshot.tar.gz";
  snapshot->add_option("-o,--output", snapshot_out, "Output directory or FILE.tar.gz");

  CLI::App* cluster = app.add_subcommand(
      "cluster",
      "Run the node checks on every rank, diff the hosts, test TCP connectivity and bandwidth between every pair; "
      "rank 0 prints one report. Rendezvous from commkit-run/torchrun/mpirun/srun, or --store/--rank/--world");
  cluster->fallthrough();
  std::string store_url;
  int cl_rank = -1, cl_world = -1;
  bool host_store = false, cluster_json = false;
  double cl_timeout_s = 60, cl_connect_s = 3;
  std::int64_t bw_bytes = 8 << 20;
  std::string listen_addr, session = "default";
  cluster->add_option("--store", store_url, "Store HOST:PORT (tcp) shared by every rank; default: from the launcher's environment");
  cluster->add_option("--rank", cl_rank, "This rank (with --store)");
  cluster->add_option("--world", cl_world, "Number of ranks (with --store)");
  cluster->add_flag("--host-store", host_store, "This process hosts the tcp store at --store's port (usually rank 0)");
  cluster->add_option("--timeout", cl_timeout_s, "Seconds to wait for the other ranks at each step (default 60)");
  cluster->add_option("--connect-timeout", cl_connect_s, "Seconds per TCP connection attempt (default 3)");
  cluster->add_option("--bandwidth-bytes", bw_bytes, "Bytes sent per ordered pair for the bandwidth test (0: off)");
  cluster->add_option("--listen", listen_addr, "Address to probe on (default: the interface NCCL would pick)");
  cluster->add_option("--session", session, "Key prefix in the store (run several sessions on one store)");
  cluster->add_flag("--json", cluster_json, "JSON output");

  app.set_version_flag("--version", std::string(COMMKIT_VERSION_STRING));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kUsageError;
  }

  json = json || format == "json";
  const bool prometheus = format == "prometheus";
  if (flight->app->parsed()) return gpudoctor::RunFlightCommand(*flight, json);
  if (prometheus && bench) {
    std::cerr << "gpudoctor: --format prometheus renders the checks only; it cannot be combined with --bench\n";
    return kUsageError;
  }

  dx::CheckRegistry registry = dx::CheckRegistry::BuiltIn();
  if (list) {
    for (const dx::Check& c : registry.checks())
      std::cout << c.info.id << "\t" << c.info.category << "\t" << c.info.title << "\n";
    return 0;
  }

  if (explain->parsed()) {
    auto inputs = dx::LoadExplainInputs(log_files, std::cin);
    if (!inputs.ok()) {
      std::cerr << inputs.status().message() << "\n";
      return kUsageError;
    }
    // Flight-recorder dumps ({"commkit_flight_recorder": ...}) get the flight verdict (which rank
    // stopped or diverged, at which operation); logs get the explanation; both when both are given.
    const bool as_json = explain_json || json;
    int rc = 0;
    if (!inputs.value().flight_records.empty()) {
      std::vector<std::pair<std::string, std::string>> documents;
      for (const dx::LogInput& d : inputs.value().flight_records) documents.emplace_back(d.name, d.text);
      auto verdict = dx::ExplainFlightRecords(documents);
      if (!verdict.ok()) {
        std::cerr << "gpudoctor explain: " << verdict.status().ToString() << "\n";
        return kUsageError;
      }
      std::cout << (as_json ? verdict->ToJson() : verdict->ToText());
      rc = verdict->ExitCode();
    }
    if (!inputs.value().logs.empty()) {
      dx::Explanation ex = dx::ExplainLogs(inputs.value().logs);
      std::cout << (as_json ? ex.ToJson() : ex.ToText());
    } else if (inputs.value().flight_records.empty()) {
      std::cerr << "gpudoctor explain: no log among the inputs\n";
      return kUsageError;
    }
    return rc;
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
  if (cluster->parsed()) {
    using namespace std::chrono;
    dx::ClusterOptions options;
    options.selection = selection;
    options.timeout = milliseconds(static_cast<std::int64_t>(cl_timeout_s * 1000));
    options.connect_timeout = milliseconds(static_cast<std::int64_t>(cl_connect_s * 1000));
    options.bandwidth_bytes = bw_bytes;
    options.listen_address = listen_addr;
    options.session = session;
    std::shared_ptr<commkit::Store> store;
    std::unique_ptr<commkit::TcpStoreServer> server;
    if (!store_url.empty()) {
      if (cl_rank < 0 || cl_world < 1 || cl_rank >= cl_world) {
        std::cerr << "gpudoctor cluster: --store needs --rank R and --world N with 0 <= R < N\n";
        return kUsageError;
      }
      const std::string hp = store_url.rfind("tcp://", 0) == 0 ? store_url.substr(6) : store_url;
      auto endpoint = commkit::ParseHostPort(hp);
      if (!endpoint.ok()) {
        std::cerr << "gpudoctor cluster: --store must be HOST:PORT or [IPV6]:PORT (got '" << store_url
                  << "': " << endpoint.status().message() << ")\n";
        return kUsageError;
      }
      const char* tok = std::getenv("COMMKIT_STORE_TOKEN");  // the job secret, as commkit-run uses it
      const std::string token = tok != nullptr ? tok : "";
      if (host_store) {
        commkit::TcpStoreServerOptions so;
        so.token = token;
        so.host = endpoint->host;
        so.port = endpoint->port;
        auto s = commkit::TcpStoreServer::Start(so);
        if (!s.ok()) {
          std::cerr << "gpudoctor cluster: cannot host the store: " << s.status().ToString() << "\n";
          return 2;
        }
        server = std::move(*s);
      }
      commkit::LaunchInfo info;
      info.rank = cl_rank;
      info.world_size = cl_world;
      auto st = commkit::OpenStore("tcp://" + hp, info, token, /*hosted=*/true, options.timeout);
      if (!st.ok()) {
        std::cerr << "gpudoctor cluster: " << st.status().ToString() << "\n";
        return 2;
      }
      store = *st;
      options.rank = cl_rank;
      options.world = cl_world;
    } else {
      commkit::RendezvousOptions ro;
      ro.timeout = options.timeout;
      ro.wait_for_all = false;  // RunCluster's bounded gather names the ranks that never arrive
      auto rdzv = commkit::RendezvousFromEnvironment(ro);
      if (!rdzv.ok()) {
        std::cerr << "gpudoctor cluster: " << rdzv.status().ToString()
                  << "\n(run under commkit-run, torchrun, mpirun or srun, or pass --store HOST:PORT --rank R --world N)\n";
        return 2;
      }
      store = rdzv->store;
      options.rank = rdzv->info.rank;
      options.world = rdzv->info.world_size;
    }
    auto result = dx::RunCluster(*store, registry, dx::CheckContext{commkit::SystemView::Live()}, options);
    if (!result.ok()) {
      std::cerr << "gpudoctor cluster: " << result.status().ToString() << "\n";
      return 2;
    }
    if (!result->has_value()) return 0;  // not rank 0: rank 0 prints the report
    const dx::ClusterReport& report = **result;
    std::cout << ((cluster_json || json) ? report.ToJson() : report.ToText(UseColor(no_color)));
    std::cout.flush();
    // The store host keeps serving briefly so the other ranks' last reads complete.
    if (server) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return report.ExitCode();
  }
  if (!only.empty() && dx::SelectChecks(registry, selection).empty()) {
    std::cerr << "gpudoctor: --only selects no check (see gpudoctor --list)\n";
    return kUsageError;
  }
  if (!from.empty() && bench) {
    std::cerr << "gpudoctor: --bench measures this machine; it cannot be combined with --from\n";
    return kUsageError;
  }
  if (!from.empty()) {
    auto snap = dx::SnapshotView::Open(from);
    if (!snap.ok()) {
      std::cerr << snap.status().ToString() << "\n";
      return kUsageError;
    }
    dx::Report report = dx::RunChecks(registry, dx::CheckContext{(*snap)->view()}, selection);
    Print(report, json, UseColor(no_color), prometheus);
    return report.ExitCode();
  }
  dx::Report report = dx::RunChecks(registry, dx::CheckContext{commkit::SystemView::Live()}, selection);
  if (!bench) {
    Print(report, json, UseColor(no_color), prometheus);
    return report.ExitCode();
  }
  auto result = dx::RunLocalBench();
  if (!result.ok()) {
    std::cerr << result.status().ToString() << "\n";
    return kUsageError;
  }
  if (json) {
    nlohmann::json doc = nlohmann::json::parse(Sanitized(report).ToJson());
    doc["bench"] = nlohmann::json::parse(result->ToJson());
    if (!result->AllCorrect()) doc["exit_code"] = 2;
    std::cout << doc.dump(2) << "\n";
  } else {
    std::cout << Sanitized(report).ToText(UseColor(no_color)) << result->ToText();
  }
  // A wrong all-reduce result is a failure of this node's comm stack.
  return result->AllCorrect() ? report.ExitCode() : 2;
}
