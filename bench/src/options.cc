#include "commkit/bench/options.h"

#include <algorithm>
#include <cmath>

#include <CLI/CLI.hpp>

#include "commkit/common/config.h"
#include "commkit/common/strings.h"

namespace commkit::bench {

std::string_view ToString(OutputFormat format) {
  switch (format) {
    case OutputFormat::kTable: return "table";
    case OutputFormat::kJson: return "json";
    case OutputFormat::kCsv: return "csv";
  }
  return "?";
}

Result<std::size_t> ParseSize(std::string_view text) {
  auto bytes = ParseByteSize(text);
  if (!bytes.ok()) return Status::InvalidArgument(StrCat("commkit-bench: ", bytes.status().message()));
  return bytes;
}

Result<DataType> ParseDataType(std::string_view text) {
  const std::string t = ToLower(text);
  if (t == "float" || t == "float32" || t == "f32" || t == "fp32") return DataType::kFloat32;
  if (t == "double" || t == "float64" || t == "f64" || t == "fp64") return DataType::kFloat64;
  if (t == "half" || t == "float16" || t == "f16" || t == "fp16") return DataType::kFloat16;
  if (t == "bfloat16" || t == "bf16") return DataType::kBFloat16;
  if (t == "int8" || t == "char") return DataType::kInt8;
  if (t == "uint8") return DataType::kUInt8;
  if (t == "int32" || t == "int") return DataType::kInt32;
  if (t == "int64") return DataType::kInt64;
  return Status::InvalidArgument(StrCat("commkit-bench: unknown data type '", text,
                                        "'; choose float, double, half, bfloat16, int8, uint8, int32 or int64"));
}

Result<ReduceOp> ParseReduceOp(std::string_view text) {
  const std::string t = ToLower(text);
  if (t == "sum") return ReduceOp::Sum();
  if (t == "prod") return ReduceOp::Prod();
  if (t == "min") return ReduceOp::Min();
  if (t == "max") return ReduceOp::Max();
  if (t == "avg") return ReduceOp::Avg();
  return Status::InvalidArgument(
      StrCat("commkit-bench: unknown reduction '", text, "'; choose sum, prod, min, max or avg"));
}

Result<std::vector<std::size_t>> SizeSweep(std::size_t min_bytes, std::size_t max_bytes, double factor,
                                           std::size_t increment) {
  if (min_bytes == 0) return Status::InvalidArgument("commkit-bench: -b/--minbytes must be at least 1 byte");
  if (max_bytes < min_bytes) {
    return Status::InvalidArgument(StrCat("commkit-bench: -e/--maxbytes (", max_bytes,
                                          ") is smaller than -b/--minbytes (", min_bytes, ")"));
  }
  if (increment == 0 && !(factor > 1.0)) {
    return Status::InvalidArgument(
        StrCat("commkit-bench: -f/--stepfactor must be > 1 (got ", factor, "), or give -i/--stepbytes"));
  }
  std::vector<std::size_t> sizes;
  constexpr std::size_t kMaxSizes = 100000;
  std::size_t size = min_bytes;
  while (size <= max_bytes) {
    sizes.push_back(size);
    if (sizes.size() > kMaxSizes) {
      return Status::InvalidArgument(StrCat("commkit-bench: the sweep has more than ", kMaxSizes,
                                            " sizes; use a larger -f/-i or a smaller range"));
    }
    std::size_t next = increment != 0 ? size + increment
                                      : static_cast<std::size_t>(std::llround(static_cast<double>(size) * factor));
    if (next <= size) next = size + 1;
    if (next < size) break;  // overflow
    size = next;
  }
  return sizes;
}

IterCounts ItersForSize(const BenchOptions& options, std::size_t bytes) {
  IterCounts c{options.warmup, options.iters};
  if (bytes > options.large_bytes && options.large_bytes > 0) {
    const double scale = static_cast<double>(options.large_bytes) / static_cast<double>(bytes);
    c.iters = std::max(2, static_cast<int>(std::ceil(options.iters * scale)));
    c.warmup = std::max(1, static_cast<int>(std::ceil(options.warmup * scale)));
    c.iters = std::min(c.iters, options.iters);
    c.warmup = std::min(c.warmup, options.warmup);
  }
  return c;
}

bool ProgressAllowed(const EnvMap& env, bool stderr_is_tty) {
  if (env.contains("NO_COLOR")) return false;
  if (auto term = env.find("TERM"); term != env.end() && term->second == "dumb") return false;
  // These launchers forward the ranks' output through a pseudo-terminal of their own (Open MPI's
  // iof), so isatty() is true in the rank even when mpirun's output is a file.
  for (const char* launcher_var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    if (env.contains(launcher_var)) return false;
  }
  return stderr_is_tty;
}

Result<BenchOptions> ParseBenchArgs(const std::vector<std::string>& argv) {
  BenchOptions o;
  CLI::App app{
      "commkit-bench: nccl-tests style sweeps of one collective over commkit process groups.\n"
      "Launch with commkit-run, mpirun or srun, or use --local N for N threads in one process.",
      argv.empty() ? "commkit-bench" : argv[0]};
  std::string collective = "allreduce", backend = "auto", compare, minb = "8", maxb = "1M", stepb = "0";
  std::string dtype = "float", op = "sum", format = "table";
  int check = 1, in_place_only = 0;
  bool out_of_place_only = false, in_place_flag = false, no_progress = false;
  app.add_option("collective", collective, "allreduce, allgather, reduce_scatter, broadcast, reduce, "
                                           "alltoall or sendrecv")
      ->capture_default_str();
  app.add_option("-B,--backend", backend,
                 "process-group backend (auto, host, gloo, mpi, nccl; nccl benchmarks device memory)")
      ->capture_default_str();
  app.add_option("--compare", compare, "comma-separated backends run over the same sweep; prints ratios");
  app.add_option("--raw", o.raw, "also run the library directly (mpi, gloo, nccl; host: commkit's engine without ProcessGroup) to "
                 "measure wrapper overhead");
  app.add_option("-b,--minbytes", minb, "smallest size (K/M/G suffixes)")->capture_default_str();
  app.add_option("-e,--maxbytes", maxb, "largest size")->capture_default_str();
  app.add_option("-f,--stepfactor", o.step_factor, "multiply the size by this")->capture_default_str();
  app.add_option("-i,--stepbytes", stepb, "add this to the size (overrides -f)");
  app.add_option("-d,--datatype", dtype, "float, double, half, bfloat16, int8, uint8, int32, int64")
      ->capture_default_str();
  app.add_option("-o,--op", op, "sum, prod, min, max, avg")->capture_default_str();
  app.add_option("-r,--root", o.root, "root rank (broadcast, reduce)")->capture_default_str();
  app.add_option("-w,--warmup_iters", o.warmup, "warmup iterations")->capture_default_str();
  app.add_option("-n,--iters", o.iters, "timed iterations")->capture_default_str();
  app.add_option("--large-bytes", o.large_bytes, "above this size, scale iterations down")->capture_default_str();
  app.add_option("-c,--check", check, "verify the results (0/1)")->capture_default_str();
  app.add_flag("--in-place-only", in_place_flag, "run only the in-place variant");
  app.add_flag("--out-of-place-only", out_of_place_only, "run only the out-of-place variant");
  app.add_option("--format", format, "table, json (JSON lines) or csv")->capture_default_str();
  app.add_option("--output", o.output_path, "write the results to this file instead of stdout");
  app.add_option("--local", o.local_ranks, "run N ranks as threads in this process (HashStore)");
  app.add_option("-g,--ngpus", o.ranks_per_process,
                 "ranks (threads) per launched process, one GPU each for device backends")
      ->capture_default_str();
  app.add_option("-z,--blocking", o.blocking,
                 "0: enqueue timed calls back to back; 1: wait for each, then a barrier; 2: wait, no barrier")
      ->capture_default_str();
  app.add_option("-G,--cudagraph", o.graph_launches,
                 "device backends: capture the timed calls in a CUDA graph and launch it N times (0: off)")
      ->capture_default_str();
  int aggregate = static_cast<int>(o.aggregate);
  app.add_option("-a,--average", aggregate, "time over ranks: 0 rank 0, 1 mean, 2 min, 3 max")
      ->capture_default_str();
  app.add_option("--timeout", o.timeout_s, "per-operation timeout in seconds")->capture_default_str();
  app.add_flag("--no-progress", no_progress, "no progress bar on stderr");
  int mismatch = 1;
  app.add_option("--predict", o.predict,
                 "all-reduce: predicted busbw from the topology cost model (measure, defaults or off)")
      ->check(CLI::IsMember({"measure", "defaults", "off"}));
  app.add_flag("--plan", o.plan,
               "print which algorithm runs at each size and why (selection table, docs/tuning.md); measure nothing");
  app.add_flag("--calibrate", o.calibrate,
               "allreduce, allgather, broadcast: time every algorithm of each backend and write the calibration cache (docs/tuning.md)");
  app.add_option("--calibrate-repeats", o.calibrate_repeats,
                 "--calibrate: sweeps per algorithm, interleaved; the median time of each size is fitted")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--mismatch-check", mismatch,
                 "the process group's cross-rank mismatch check (0/1; costs one small allreduce per call)")
      ->capture_default_str();
  (void)in_place_only;
  app.set_version_flag("--version", std::string(COMMKIT_VERSION_STRING));

  std::vector<std::string> args(argv.size() > 1 ? argv.begin() + 1 : argv.end(), argv.end());
  std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    return Status::Aborted(app.help());
  } catch (const CLI::CallForVersion&) {  // Aborted: printed to stdout, exit 0 (like --help)
    return Status::Aborted(StrCat(COMMKIT_VERSION_STRING, "\n"));
  } catch (const CLI::ParseError& e) {
    return Status::InvalidArgument(StrCat("commkit-bench: ", e.what(), " (see --help)"));
  }
  COMMKIT_ASSIGN_OR_RETURN(o.collective, ParseCollective(collective));
  if (!compare.empty()) {
    o.backends.clear();
    for (const std::string& b : Split(compare, ',')) {
      std::string name(Trim(b));
      if (name.empty()) return Status::InvalidArgument("commkit-bench: --compare has an empty backend name");
      if (std::find(o.backends.begin(), o.backends.end(), name) != o.backends.end()) {
        return Status::InvalidArgument(StrCat("commkit-bench: --compare lists '", name, "' twice"));
      }
      o.backends.push_back(name);
    }
  } else {
    o.backends = {backend};
  }
  if (!o.raw.empty() && o.raw != "mpi" && o.raw != "gloo" && o.raw != "host" && o.raw != "nccl") {
    return Status::InvalidArgument(StrCat("commkit-bench: --raw '", o.raw, "': choose mpi, gloo, host or nccl"));
  }
  if (o.ranks_per_process < 1 || o.ranks_per_process > 64) {
    return Status::InvalidArgument("commkit-bench: -g/--ngpus must be between 1 and 64");
  }
  if (o.local_ranks > 0 && o.ranks_per_process > 1 && o.ranks_per_process != o.local_ranks) {
    return Status::InvalidArgument(StrCat("commkit-bench: --local ", o.local_ranks, " with -g ", o.ranks_per_process,
                                          ": in one process -g is the number of local ranks; give one of them"));
  }
  if (o.blocking < 0 || o.blocking > 2) return Status::InvalidArgument("commkit-bench: -z/--blocking is 0, 1 or 2");
  if (o.graph_launches < 0) return Status::InvalidArgument("commkit-bench: -G/--cudagraph must be >= 0");
  if (o.graph_launches > 0 && o.blocking != 0) {
    return Status::InvalidArgument(
        "commkit-bench: -G captures the timed calls into a graph, which cannot wait between calls; drop -z");
  }
  if (aggregate < 0 || aggregate > 3) {
    return Status::InvalidArgument("commkit-bench: -a/--average is 0 (rank 0), 1 (mean), 2 (min) or 3 (max)");
  }
  o.aggregate = static_cast<TimeAggregate>(aggregate);
  COMMKIT_ASSIGN_OR_RETURN(o.min_bytes, ParseSize(minb));
  COMMKIT_ASSIGN_OR_RETURN(o.max_bytes, ParseSize(maxb));
  COMMKIT_ASSIGN_OR_RETURN(o.step_bytes, ParseSize(stepb));
  COMMKIT_RETURN_IF_ERROR(SizeSweep(o.min_bytes, o.max_bytes, o.step_factor, o.step_bytes).status());
  COMMKIT_ASSIGN_OR_RETURN(o.dtype, ParseDataType(dtype));
  COMMKIT_ASSIGN_OR_RETURN(o.op, ParseReduceOp(op));
  if (o.warmup < 0) return Status::InvalidArgument("commkit-bench: -w/--warmup_iters must be >= 0");
  if (o.iters < 1) return Status::InvalidArgument("commkit-bench: -n/--iters must be >= 1");
  if (o.root < 0) return Status::InvalidArgument("commkit-bench: -r/--root must be >= 0");
  if (o.local_ranks < 0 || o.local_ranks > 256) {
    return Status::InvalidArgument("commkit-bench: --local must be between 1 and 256");
  }
  if (o.timeout_s < 1) return Status::InvalidArgument("commkit-bench: --timeout must be >= 1 second");
  if (in_place_flag && out_of_place_only) {
    return Status::InvalidArgument("commkit-bench: --in-place-only and --out-of-place-only exclude each other");
  }
  o.in_place = !out_of_place_only;
  o.out_of_place = !in_place_flag;
  if (in_place_flag && !Describe(o.collective).has_in_place) {
    return Status::InvalidArgument(
        StrCat("commkit-bench: ", ToString(o.collective), " has no in-place variant; drop --in-place-only"));
  }
  if (out_of_place_only && !Describe(o.collective).has_out_of_place) {
    return Status::InvalidArgument(StrCat("commkit-bench: ", ToString(o.collective),
                                          " has one buffer only (in-place); drop --out-of-place-only"));
  }
  if (!Describe(o.collective).has_in_place) o.in_place = false;
  if (!Describe(o.collective).has_out_of_place) o.out_of_place = false;
  if (o.calibrate && o.collective != BenchCollective::kAllreduce && o.collective != BenchCollective::kAllgather &&
      o.collective != BenchCollective::kBroadcast)
    return Status::InvalidArgument(StrCat("commkit-bench: --calibrate measures allreduce, allgather and broadcast (the "
                                          "collectives with more than one algorithm), not ", ToString(o.collective)));
  if (o.calibrate && o.plan) return Status::InvalidArgument("commkit-bench: --plan and --calibrate exclude each other");
  o.check = check != 0;
  o.progress = !no_progress;
  o.mismatch_check = mismatch != 0;
  const std::string f = ToLower(format);
  if (f == "table") {
    o.format = OutputFormat::kTable;
  } else if (f == "json" || f == "jsonl") {
    o.format = OutputFormat::kJson;
  } else if (f == "csv") {
    o.format = OutputFormat::kCsv;
  } else {
    return Status::InvalidArgument(StrCat("commkit-bench: --format '", format, "': choose table, json or csv"));
  }
  return o;
}

}  // namespace commkit::bench
