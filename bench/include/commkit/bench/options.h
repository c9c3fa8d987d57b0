// commkit-bench options and their parsing (CLI11 inside options.cc). Parsing is a pure function of
// argv so that argument errors are unit-tested without running anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/bench/collective.h"
#include "commkit/comm/launch_env.h"
#include "commkit/comm/types.h"
#include "commkit/common/status.h"

namespace commkit::bench {

enum class OutputFormat : unsigned char { kTable, kJson, kCsv };
std::string_view ToString(OutputFormat format);

// -a: how the per-rank times of a size combine into the reported time (nccl-tests' numbering).
enum class TimeAggregate : unsigned char { kRank0 = 0, kMean = 1, kMin = 2, kMax = 3 };

struct BenchOptions {
  BenchCollective collective = BenchCollective::kAllreduce;
  std::vector<std::string> backends = {"auto"};  // one, or several with --compare
  std::string raw;                 // --raw <lib>: also run the library directly ("mpi", "gloo", "host", "nccl")
  std::size_t min_bytes = 8;       // -b
  std::size_t max_bytes = 1 << 20;  // -e
  double step_factor = 2;          // -f (used when step_bytes == 0)
  std::size_t step_bytes = 0;      // -i
  DataType dtype = DataType::kFloat32;  // -d
  ReduceOp op = ReduceOp::Sum();   // -o
  int root = 0;                    // -r
  int warmup = 5;                  // -w
  int iters = 20;                  // -n
  // Above this size the iteration and warmup counts shrink so that each size moves about
  // `iters * large_bytes` bytes (at least 2 iterations, 1 warmup).
  std::size_t large_bytes = 16u << 20;
  bool out_of_place = true;
  bool in_place = true;
  bool check = true;               // -c 0 disables verification
  OutputFormat format = OutputFormat::kTable;
  std::string output_path;         // --output FILE (stdout when empty)
  int local_ranks = 0;             // --local N: N threads in this process over a HashStore
  // -g G: ranks (threads) per launched process, each on its own GPU for device backends: a job of P
  // processes has P * G ranks (rank = process rank * G + thread). With --local, -g is --local's N.
  int ranks_per_process = 1;
  // -z: 0 enqueue the timed calls back to back; 1 wait for each call to complete, then a barrier;
  // 2 wait for each call, no barrier (nccl-tests' -z 1 and 2). Host backends always complete each call.
  int blocking = 0;
  // -G N: device backends: capture the timed calls into a CUDA graph and launch it N times; time =
  // elapsed / (iters * N). 0: no graph.
  int graph_launches = 0;
  TimeAggregate aggregate = TimeAggregate::kMax;  // -a
  int timeout_s = 120;             // per-operation timeout
  bool progress = true;            // progress bar on a terminal (--no-progress; see ProgressAllowed)
  // ProcessGroupOptions::check_mismatch (one extra 16-byte allreduce per collective when on);
  // --mismatch-check 0 measures the wrapper without it. COMMKIT_CHECK_MISMATCH still overrides.
  bool mismatch_check = true;
  // --predict: all-reduce rows get the topology cost model's busbw ("measure": calibrated on this host,
  // about a second; "defaults": the model's documented defaults; "off").
  std::string predict = "measure";
  // --plan: print which algorithm the selection table (commkit/comm/tuning.h) runs at each size of the
  // sweep and why, with the predicted time, for every backend of -B/--compare; nothing is measured.
  bool plan = false;
  // --calibrate: all-reduce only; sweep every algorithm of every backend of -B/--compare (each forced
  // in turn), fit alpha/beta per size piece and write the calibration cache (docs/tuning.md).
  bool calibrate = false;
  // --calibrate-repeats: sweeps per algorithm, interleaved across algorithms; each size's median time
  // is fitted, so one descheduled sweep does not move the calibration.
  int calibrate_repeats = 3;
};

// "8", "64K", "1M", "2G", "1.5K", "16KiB", "4MB" (binary multiples, as nccl-tests). Error on garbage,
// negative or overflowing values.
Result<std::size_t> ParseSize(std::string_view text);

// "float"/"float32"/"f32", "double"/"float64", "half"/"float16", "bfloat16", "int8", "uint8",
// "int32"/"int", "int64".
Result<DataType> ParseDataType(std::string_view text);
// "sum", "prod", "min", "max", "avg".
Result<ReduceOp> ParseReduceOp(std::string_view text);

// The sizes of the sweep: min, then *factor (or +increment) while <= max. Validates the range.
Result<std::vector<std::size_t>> SizeSweep(std::size_t min_bytes, std::size_t max_bytes, double factor,
                                           std::size_t increment);

// Warmup and timed iterations for one size (fewer for sizes above options.large_bytes).
struct IterCounts {
  int warmup = 0;
  int iters = 0;
};
IterCounts ItersForSize(const BenchOptions& options, std::size_t bytes);

// Whether the progress bar may be drawn on stderr: never with NO_COLOR set (any value) or TERM=dumb,
// nor under Open MPI, MPICH/Intel MPI or Slurm, whose launchers hand ranks a pseudo-terminal even when
// the job's output goes to a file (the rank cannot see the real stdout); otherwise when stderr is a
// terminal. Pure, so that it is unit-tested; the caller passes isatty(STDERR_FILENO).
bool ProgressAllowed(const EnvMap& env, bool stderr_is_tty);

// Parses the command line (argv[0] is the program name). `--help` returns a Status with code
// kAborted whose message is the help text (print it, exit 0); other errors are InvalidArgument.
Result<BenchOptions> ParseBenchArgs(const std::vector<std::string>& argv);

}  // namespace commkit::bench
