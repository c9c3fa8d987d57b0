// The plan: what the table will run at each size and why, as text and JSON.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commkit/comm/tuning.h"
#include "commkit/common/strings.h"

namespace commkit::tune {

namespace {

std::string ParamsText(const Params& p) {
  std::vector<std::string> out;
  if (p.segment_bytes) out.push_back(StrCat("segment=", HumanBytes(static_cast<double>(p.segment_bytes))));
  if (p.between) out.push_back(StrCat("between=", ToString(*p.between)));
  return Join(out, " ");
}

std::string Time(double s) { return s < 0 ? std::string("-") : HumanSeconds(s); }

}  // namespace

std::vector<PlanRow> Plan(const Table& table, CollectiveKind collective, MemoryKind memory, std::size_t min_bytes,
                          std::size_t max_bytes) {
  std::vector<PlanRow> rows;
  if (max_bytes < min_bytes) return rows;
  // The sizes: min, the powers of two above it, max.
  std::vector<std::size_t> sizes = {min_bytes};
  for (int k = 0; k < 63; ++k) {
    const std::size_t s = std::size_t{1} << k;
    if (s > min_bytes && s < max_bytes) sizes.push_back(s);
  }
  if (max_bytes > min_bytes) sizes.push_back(max_bytes);
  for (std::size_t bytes : sizes) {
    const Choice c = table.Select(collective, memory, bytes);
    const auto [predicted, by] = table.Predict(collective, c.algorithm, bytes);
    if (!rows.empty()) {
      PlanRow& last = rows.back();
      if (last.algorithm == c.algorithm && last.params == c.params && last.source == c.source && last.why == c.why) {
        last.max_bytes = bytes;
        last.predicted_max_s = predicted;
        continue;
      }
    }
    PlanRow row;
    row.backend = std::string(table.backend());
    row.collective = collective;
    row.memory = memory;
    row.min_bytes = row.max_bytes = bytes;
    row.algorithm = c.algorithm;
    row.params = c.params;
    row.source = c.source;
    row.why = std::string(c.why);
    row.predicted_min_s = row.predicted_max_s = predicted;
    row.predicted_by = by;
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string PlanText(const std::vector<PlanRow>& rows) {
  std::ostringstream out;
  out << "# backend  collective   sizes                  algorithm                  source       predicted (first..last)  why\n";
  for (const PlanRow& r : rows) {
    std::string sizes = StrCat(HumanBytes(static_cast<double>(r.min_bytes)), " .. ",
                               HumanBytes(static_cast<double>(r.max_bytes)));
    std::string algo = std::string(ToString(r.algorithm));
    if (const std::string p = ParamsText(r.params); !p.empty()) algo += " " + p;
    std::string pred = StrCat(Time(r.predicted_min_s), " .. ", Time(r.predicted_max_s));
    if (!r.predicted_by.empty()) pred += StrCat(" (", r.predicted_by, ")");
    char line[512];
    std::snprintf(line, sizeof(line), "  %-8s %-12s %-22s %-26s %-12s %-24s ", r.backend.c_str(),
                  std::string(ToString(r.collective)).c_str(), sizes.c_str(), algo.c_str(),
                  std::string(ToString(r.source)).c_str(), pred.c_str());
    out << line << r.why << "\n";
  }
  return out.str();
}

std::string Describe(const Table& table, CollectiveKind collective, MemoryKind memory) {
  std::vector<std::string> parts;
  for (const PlanRow& r : Plan(table, collective, memory, 0, std::size_t{1} << 30)) {
    std::string algo(ToString(r.algorithm));
    if (const std::string p = ParamsText(r.params); !p.empty()) algo += StrCat(" (", p, ")");
    parts.push_back(StrCat(algo, " ", HumanBytes(static_cast<double>(r.min_bytes)), "..",
                           HumanBytes(static_cast<double>(r.max_bytes)), " [", ToString(r.source), "]"));
  }
  return Join(parts, ", ");
}

std::string PlanJson(const std::vector<PlanRow>& rows) {
  nlohmann::json a = nlohmann::json::array();
  for (const PlanRow& r : rows) {
    nlohmann::json j;
    j["backend"] = r.backend;
    j["collective"] = ToString(r.collective);
    j["memory"] = ToString(r.memory);
    j["min_bytes"] = r.min_bytes;
    j["max_bytes"] = r.max_bytes;
    j["algorithm"] = ToString(r.algorithm);
    if (r.params.segment_bytes) j["segment_bytes"] = r.params.segment_bytes;
    if (r.params.between) j["between"] = ToString(*r.params.between);
    j["source"] = ToString(r.source);
    j["why"] = r.why;
    if (r.predicted_min_s >= 0) j["predicted_min_s"] = r.predicted_min_s;
    if (r.predicted_max_s >= 0) j["predicted_max_s"] = r.predicted_max_s;
    if (!r.predicted_by.empty()) j["predicted_by"] = r.predicted_by;
    a.push_back(std::move(j));
  }
  return a.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace commkit::tune
