// Results of a sweep and their three output formats: the nccl-tests table, JSON lines and CSV.
// Formatting is pure (strings in, strings out) so that the formats are unit-tested.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "commkit/bench/collective.h"
#include "commkit/bench/options.h"

namespace commkit::bench {

// One placement (out-of-place or in-place) of one size.
struct Measurement {
  bool valid = false;       // false: not run (no in-place variant, or disabled)
  double time_us = 0;       // mean time per iteration, max over ranks
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  long long wrong = -1;     // elements wrong, summed over ranks; -1: not checked
  // Device backends: host time to issue one call (enqueue, without waiting for the GPU), combined over
  // ranks like time_us; 0 for host backends, whose calls complete before they return.
  double issue_us = 0;
};

struct ResultRow {
  std::string backend;      // "gloo", "mpi", "raw-mpi", ...
  BenchCollective collective = BenchCollective::kAllreduce;
  std::size_t bytes = 0;    // the measured size (nccl-tests "size")
  std::size_t count = 0;    // elements (nccl-tests "count")
  DataType dtype = DataType::kFloat32;
  std::string op;           // "sum" ... or "none"
  int root = -1;            // -1 when the collective has no root
  int nranks = 0;
  int warmup = 0;
  int iters = 0;
  Measurement out_of_place;
  Measurement in_place;
  // The topology cost model's prediction for this size (all-reduce only; 0 when none): see predict.h.
  double pred_busbw_gbps = 0;
  std::string pred_algorithm;
  // The command line that reproduces this row (reproduce.h); "" when unknown (e.g. in unit tests).
  std::string reproduce;
};

// Header lines of the table (start with '#'), e.g. "# commkit-bench allreduce backend=gloo nranks=2".
std::string TableHeader();
std::string TableRow(const ResultRow& row);
// Footer: "# Out of bounds values : 0 OK" and "# Avg bus bandwidth    : 1.234" (over all valid cells).
std::string TableFooter(const std::vector<ResultRow>& rows);

// One JSON object per row and placement, newline-terminated, keys: backend, collective, size, count,
// type, redop, root, nranks, placement ("out_of_place"/"in_place"), time_us, algbw_gbps, busbw_gbps,
// wrong, warmup, iters; plus pred_busbw_gbps and pred_algorithm when the row has a prediction, and
// reproduce (the command line) when the row has one; issue_us for device backends. Every line is a measurement, so that consumers
// reading each line as a row (scripts/scale-study.py, gloo-algorithm-sweep.py) keep working.
std::string JsonLines(const ResultRow& row);

// CSV (RFC 4180): the same columns as the JSON keys without the prediction, then a last column
// "reproduce", always double-quoted (the command contains commas and spaces), in every row. A last
// column rather than a '#' comment line, which csv.DictReader, Excel and pandas' defaults would take
// for the header.
std::string CsvHeader();
std::string CsvRows(const ResultRow& row);
// RFC 4180 field: "text" with " doubled.
std::string CsvQuote(std::string_view text);

// --compare: per size, busbw of each backend and its ratio to the first backend (out-of-place, or
// in-place when out-of-place did not run). `rows` holds the rows of all backends.
std::string CompareTable(const std::vector<std::string>& backends, const std::vector<ResultRow>& rows);

// Total wrong elements over all rows (unchecked cells count 0).
long long TotalWrong(const std::vector<ResultRow>& rows);

// The whole output of a run in options.format: the table (a "# reproduce: <command>" line, the run's
// parameters, one nccl-tests table per backend, the comparison when there are several), JSON lines or
// CSV (header and rows). `reproduce` goes into the table header; JSON and CSV take it from the rows.
std::string RenderResults(const BenchOptions& options, const std::vector<ResultRow>& rows,
                          const std::string& reproduce, int nranks);

// "# Predicted vs measured busbw" per backend and size, appended to the table output. `model` is the
// cost model's description.
std::string PredictionTable(const std::vector<ResultRow>& rows, const std::string& model);

}  // namespace commkit::bench
