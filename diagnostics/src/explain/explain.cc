// Explain driver: reads the inputs, parses lines, matches the message catalog, extracts facts, compares
// the inputs, scores causes. Every stage is linear in the input; lines are capped at
// kMaxExplainLineBytes and inputs at kMaxExplainInputBytes, so no input can crash it or make it hang.
#include <istream>

#include <nlohmann/json.hpp>

#include "catalog.h"
#include "causes.h"
#include "commkit/common/file_io.h"
#include "commkit/common/strings.h"
#include "commkit/diagnostics/explain.h"
#include "facts.h"
#include "log_line.h"

namespace commkit::diagnostics {

const char* ToString(Confidence c) {
  switch (c) {
    case Confidence::kNone: return "none";
    case Confidence::kLow: return "low";
    case Confidence::kMedium: return "medium";
    case Confidence::kHigh: return "high";
  }
  return "none";
}

namespace {

constexpr std::size_t kMaxTotalLines = 4'000'000;
constexpr std::size_t kMaxTotalBytes = 512u << 20;

}  // namespace

Explanation ExplainLogs(const std::vector<LogInput>& inputs) {
  using namespace explain;
  Explanation ex;
  std::vector<std::string> names;
  for (const LogInput& in : inputs) names.push_back(in.name);
  if (inputs.size() > 1) ex.sources = names;
  std::vector<LogLine> lines;
  for (std::size_t i = 0; i < inputs.size() && lines.size() < kMaxTotalLines; ++i) {
    std::vector<LogLine> part = ReadLogLines(inputs[i].text, static_cast<int>(i), kMaxTotalLines - lines.size());
    lines.insert(lines.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  const MessageCatalog& catalog = MessageCatalog::Get();
  std::vector<Message> messages(lines.size());
  for (std::size_t i = 0; i < lines.size(); ++i) {
    messages[i].line = &lines[i];
    messages[i].match = catalog.Match(lines[i].body);
    // Rules see the NCCL source file too ("transport/nvls.cc:165 ... Cuda failure").
    messages[i].lower = Lower(lines[i].nccl_file.empty() ? lines[i].body : lines[i].nccl_file + " " + lines[i].body);
  }
  ExtractFacts(messages, names, ex.facts);
  ex.divergences = FindDivergences(messages, ex.facts, names);
  ex.diagnoses = ScoreCauses({messages, ex.facts, names, ex.divergences});
  return ex;
}

Explanation ExplainLog(std::string_view text) { return ExplainLogs({LogInput{"", std::string(text)}}); }

void AddExplainInput(ExplainInputs& inputs, LogInput input) {
  std::string_view t = input.text;
  std::size_t first = t.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && t[first] == '{' &&
      t.substr(first, 4096).find("\"commkit_flight_recorder\"") != std::string_view::npos) {
    nlohmann::json doc = nlohmann::json::parse(t, nullptr, /*allow_exceptions=*/false);
    if (doc.is_object() && doc.contains("commkit_flight_recorder")) {
      inputs.flight_records.push_back(std::move(input));
      return;
    }
  }
  inputs.logs.push_back(std::move(input));
}

Result<ExplainInputs> LoadExplainInputs(const std::vector<std::string>& paths, std::istream& stdin_stream) {
  ExplainInputs inputs;
  if (paths.size() > kMaxExplainInputs)
    return Status::InvalidArgument(StrCat("gpudoctor explain: ", paths.size(), " inputs given; at most ",
                                          kMaxExplainInputs, " are read at once (merge or pick the ranks to compare)"));
  std::size_t total = 0;
  bool stdin_used = false;
  for (const std::string& path : paths) {
    LogInput in;
    in.name = path == "-" ? "<stdin>" : path;
    if (path == "-") {
      if (stdin_used) return Status::InvalidArgument("gpudoctor explain: '-' (stdin) given more than once");
      stdin_used = true;
      std::string buf(64 * 1024, '\0');
      while (stdin_stream && in.text.size() <= kMaxExplainInputBytes) {
        stdin_stream.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        in.text.append(buf.data(), static_cast<std::size_t>(stdin_stream.gcount()));
      }
      if (in.text.size() > kMaxExplainInputBytes)
        return Status::InvalidArgument(StrCat("gpudoctor explain: stdin delivered more than ",
                                              HumanBytes(static_cast<double>(kMaxExplainInputBytes)),
                                              "; pass the relevant part of the log (e.g. tail -n 100000)"));
    } else {
      Result<std::string> text = ReadRegularFile(path, kMaxExplainInputBytes, "log file");
      if (!text.ok()) return text.status().WithContext("gpudoctor explain");
      in.text = std::move(text.value());
    }
    total += in.text.size();
    if (total > kMaxTotalBytes)
      return Status::InvalidArgument(StrCat("gpudoctor explain: the inputs add up to more than ",
                                            HumanBytes(static_cast<double>(kMaxTotalBytes)), "; pass fewer or shorter logs"));
    AddExplainInput(inputs, std::move(in));
  }
  return inputs;
}

}  // namespace commkit::diagnostics
