#include "commkit/bench/report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "commkit/common/strings.h"

namespace commkit::bench {
namespace {

std::string Format(const char* fmt, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  return buf;
}

std::string Cell(const Measurement& m) {
  if (!m.valid) return Format("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
  std::string wrong = m.wrong < 0 ? "N/A" : std::to_string(m.wrong);
  // nccl-tests prints 4 significant-ish digits for times and 2 decimals for bandwidths.
  std::string time = m.time_us >= 10000 ? Format("%.0f", m.time_us) : Format("%.2f", m.time_us);
  return Format("  %7s  %6.2f  %6.2f  %6s", time.c_str(), m.algbw_gbps, m.busbw_gbps, wrong.c_str());
}

nlohmann::json Cell(const ResultRow& row, const Measurement& m, const char* placement) {
  return {{"backend", row.backend},
          {"collective", std::string(ToString(row.collective))},
          {"size", row.bytes},
          {"count", row.count},
          {"type", std::string(ToString(row.dtype))},
          {"redop", row.op},
          {"root", row.root},
          {"nranks", row.nranks},
          {"placement", placement},
          {"time_us", m.time_us},
          {"algbw_gbps", m.algbw_gbps},
          {"busbw_gbps", m.busbw_gbps},
          {"wrong", m.wrong},
          {"warmup", row.warmup},
          {"iters", row.iters}};
}

nlohmann::json CellWithPrediction(const ResultRow& row, const Measurement& m, const char* placement) {
  nlohmann::json j = Cell(row, m, placement);
  if (row.pred_busbw_gbps > 0) {
    j["pred_busbw_gbps"] = row.pred_busbw_gbps;
    j["pred_algorithm"] = row.pred_algorithm;
  }
  if (m.issue_us > 0) j["issue_us"] = m.issue_us;
  if (!row.reproduce.empty()) j["reproduce"] = row.reproduce;
  return j;
}

const Measurement* Primary(const ResultRow& row) {
  if (row.out_of_place.valid) return &row.out_of_place;
  if (row.in_place.valid) return &row.in_place;
  return nullptr;
}

}  // namespace

std::string TableHeader() {
  return StrCat(
      Format("#%53s%33s%33s\n", "", "out-of-place", "in-place"),
      Format("# %12s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type",
             "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"),
      Format("# %12s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "",
             "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""));
}

std::string TableRow(const ResultRow& row) {
  return StrCat(Format("  %12zu  %12zu  %8s  %6s  %6d", row.bytes, row.count, std::string(ToString(row.dtype)).c_str(),
                       row.op.c_str(), row.root),
                Cell(row.out_of_place), Cell(row.in_place), "\n");
}

std::string TableFooter(const std::vector<ResultRow>& rows) {
  double sum = 0;
  int cells = 0;
  for (const ResultRow& row : rows) {
    for (const Measurement* m : {&row.out_of_place, &row.in_place}) {
      if (!m->valid) continue;
      sum += m->busbw_gbps;
      ++cells;
    }
  }
  const long long wrong = TotalWrong(rows);
  return StrCat("# Out of bounds values : ", wrong, wrong == 0 ? " OK" : " FAILED", "\n",
                Format("# Avg bus bandwidth    : %g\n", cells ? sum / cells : 0.0), "#\n");
}

std::string JsonLines(const ResultRow& row) {
  std::string out;
  if (row.out_of_place.valid) out += CellWithPrediction(row, row.out_of_place, "out_of_place").dump() + "\n";
  if (row.in_place.valid) out += CellWithPrediction(row, row.in_place, "in_place").dump() + "\n";
  return out;
}

std::string CsvHeader() {
  return "backend,collective,size,count,type,redop,root,nranks,placement,time_us,algbw_gbps,busbw_gbps,wrong,"
         "warmup,iters,reproduce\n";
}

std::string CsvQuote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

std::string CsvRows(const ResultRow& row) {
  std::string out;
  for (auto [m, placement] : {std::pair{&row.out_of_place, "out_of_place"}, std::pair{&row.in_place, "in_place"}}) {
    if (!m->valid) continue;
    out += StrCat(row.backend, ",", ToString(row.collective), ",", row.bytes, ",", row.count, ",",
                  ToString(row.dtype), ",", row.op, ",", row.root, ",", row.nranks, ",", placement, ",",
                  Format("%.3f,%.6f,%.6f", m->time_us, m->algbw_gbps, m->busbw_gbps), ",", m->wrong, ",",
                  row.warmup, ",", row.iters, ",", CsvQuote(row.reproduce), "\n");
  }
  return out;
}

std::string CompareTable(const std::vector<std::string>& backends, const std::vector<ResultRow>& rows) {
  // size -> backend -> busbw / time
  std::map<std::size_t, std::map<std::string, const Measurement*>> by_size;
  for (const ResultRow& row : rows) {
    if (const Measurement* m = Primary(row)) by_size[row.bytes][row.backend] = m;
  }
  std::string out = "# Comparison (busbw GB/s, time us; ratio = time / time of " +
                    (backends.empty() ? std::string("?") : backends[0]) + ")\n";
  out += Format("# %12s", "size");
  for (const std::string& b : backends) {
    out += Format("  %10s  %9s  %7s", (b + ":us").c_str(), (b + ":bw").c_str(), "ratio");
  }
  out += "\n";
  for (const auto& [size, cells] : by_size) {
    out += Format("  %12zu", size);
    const Measurement* base = nullptr;
    if (!backends.empty()) {
      auto it = cells.find(backends[0]);
      if (it != cells.end()) base = it->second;
    }
    for (const std::string& b : backends) {
      auto it = cells.find(b);
      if (it == cells.end()) {
        out += Format("  %10s  %9s  %7s", "N/A", "N/A", "N/A");
        continue;
      }
      const Measurement* m = it->second;
      std::string ratio = base && base->time_us > 0 ? Format("%.3f", m->time_us / base->time_us) : "N/A";
      out += Format("  %10.2f  %9.3f  %7s", m->time_us, m->busbw_gbps, ratio.c_str());
    }
    out += "\n";
  }
  return out;
}

long long TotalWrong(const std::vector<ResultRow>& rows) {
  long long total = 0;
  for (const ResultRow& row : rows) {
    for (const Measurement* m : {&row.out_of_place, &row.in_place}) {
      if (m->valid && m->wrong > 0) total += m->wrong;
    }
  }
  return total;
}

std::string RenderResults(const BenchOptions& o, const std::vector<ResultRow>& rows, const std::string& reproduce,
                          int nranks) {
  std::ostringstream out;
  std::vector<std::string> labels;
  for (const ResultRow& r : rows) {
    if (std::find(labels.begin(), labels.end(), r.backend) == labels.end()) labels.push_back(r.backend);
  }
  switch (o.format) {
    case OutputFormat::kJson:
      for (const ResultRow& r : rows) out << JsonLines(r);
      break;
    case OutputFormat::kCsv:
      out << CsvHeader();
      for (const ResultRow& r : rows) out << CsvRows(r);
      break;
    case OutputFormat::kTable:
      out << "# reproduce: " << reproduce << "\n";
      out << "# collective " << ToString(o.collective) << ", nranks " << nranks << ", type " << ToString(o.dtype)
          << ", mismatch check " << (o.mismatch_check ? "on" : "off") << ", warmup " << o.warmup << ", iters "
          << o.iters << " (fewer above " << o.large_bytes << " B)\n#\n";
      for (const std::string& label : labels) {
        std::vector<ResultRow> mine;
        for (const ResultRow& r : rows) {
          if (r.backend == label) mine.push_back(r);
        }
        out << "# backend " << label << "\n" << TableHeader();
        for (const ResultRow& r : mine) out << TableRow(r);
        out << TableFooter(mine);
      }
      if (labels.size() > 1) out << CompareTable(labels, rows);
      break;
  }
  return out.str();
}

std::string PredictionTable(const std::vector<ResultRow>& rows, const std::string& model) {
  std::ostringstream out;
  // pred/meas is of times (= measured busbw over predicted busbw), so above 1 the model was pessimistic.
  out << "#\n# Predicted vs measured busbw (GB/s); pred/meas = predicted time / measured time; " << model << "\n";
  out << "#         size  backend        measured  predicted  pred/meas  algorithm\n";
  for (const ResultRow& r : rows) {
    if (r.pred_busbw_gbps <= 0) continue;
    const Measurement& m = r.out_of_place.valid ? r.out_of_place : r.in_place;
    if (!m.valid) continue;
    out << Format("  %12zu  %-12s  %9.3f  %9.3f  %9.2f  %s\n", r.bytes, r.backend.c_str(), m.busbw_gbps,
                  r.pred_busbw_gbps, m.busbw_gbps / r.pred_busbw_gbps, r.pred_algorithm.c_str());
  }
  return out.str();
}

}  // namespace commkit::bench
