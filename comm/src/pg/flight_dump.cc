// The flight recorder's JSON document: writing (FlightDumpToJson) and reading (ParseFlightDump).
// Dumps are read by tools from files users pass, so the reader checks every field and says which
// one is wrong instead of throwing.
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "commkit/comm/flight_recorder.h"
#include "commkit/common/strings.h"

namespace commkit {

namespace {

using nlohmann::json;

std::string Hex(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

json EntryToJson(const FlightRecord& e) {
  json j = {{"seq", e.sequence},
            {"p2p", e.p2p},
            {"op", ToString(e.kind)},
            {"dtype", ToString(e.dtype)},
            {"count", e.count},
            {"reduce", ToString(e.reduce)},
            {"root", e.root},
            {"peer", e.peer},
            {"tag", e.tag},
            {"memory", ToString(e.memory)},
            {"fingerprint", Hex(e.fingerprint)},
            {"state", ToString(e.state)},
            {"enqueued_ns", e.enqueued_ns},
            {"started_ns", e.started_ns},
            {"ended_ns", e.ended_ns}};
  if (e.error != StatusCode::kOk) j["error"] = ToString(e.error);
  return j;
}

// Looks `text` up among the names ToString gives for the enum's values 0..n-1.
template <typename Enum>
std::optional<Enum> FromName(std::string_view text, int first, int n) {
  for (int i = first; i < first + n; ++i)
    if (ToString(static_cast<Enum>(i)) == text) return static_cast<Enum>(i);
  return std::nullopt;
}

// Field readers: each names the field and what it should have been.
class Reader {
 public:
  Reader(const json& object, std::string where) : o_(object), where_(std::move(where)) {}

  Status Error(std::string_view field, std::string_view what) const {
    return Status::DataLoss(StrCat("flight recorder dump: ", where_, ": \"", field, "\" ", what));
  }
  const json* Find(std::string_view field) const {
    auto it = o_.find(std::string(field));
    return it == o_.end() ? nullptr : &*it;
  }
  template <typename Int>
  Result<Int> Integer(std::string_view field, std::optional<Int> fallback = std::nullopt) const {
    const json* v = Find(field);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return Error(field, "is missing");
    }
    if (!v->is_number_integer()) return Error(field, StrCat("must be an integer, not ", v->type_name()));
    if (v->is_number_unsigned()) {
      const auto u = v->get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<Int>::max())) return Error(field, "is out of range");
      return static_cast<Int>(u);
    }
    const auto s = v->get<std::int64_t>();
    if (s < static_cast<std::int64_t>(std::numeric_limits<Int>::min()) ||
        (s > 0 && static_cast<std::uint64_t>(s) > static_cast<std::uint64_t>(std::numeric_limits<Int>::max())))
      return Error(field, "is out of range");
    return static_cast<Int>(s);
  }
  Result<std::string> String(std::string_view field, std::optional<std::string> fallback = std::nullopt) const {
    const json* v = Find(field);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return Error(field, "is missing");
    }
    if (!v->is_string()) return Error(field, StrCat("must be a string, not ", v->type_name()));
    return v->get<std::string>();
  }
  Result<bool> Bool(std::string_view field, bool fallback) const {
    const json* v = Find(field);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return Error(field, StrCat("must be true or false, not ", v->type_name()));
    return v->get<bool>();
  }
  template <typename Enum>
  Result<Enum> Name(std::string_view field, int first, int n, std::optional<Enum> fallback = std::nullopt) const {
    const json* v = Find(field);
    if (v == nullptr && fallback) return *fallback;
    COMMKIT_ASSIGN_OR_RETURN(std::string text, String(field));
    if (auto e = FromName<Enum>(text, first, n)) return *e;
    std::vector<std::string> names;
    for (int i = first; i < first + n; ++i) names.emplace_back(ToString(static_cast<Enum>(i)));
    return Error(field, StrCat("is \"", text, "\", not one of ", Join(names, ", ")));
  }

 private:
  const json& o_;
  std::string where_;
};

Result<FlightRecord> EntryFromJson(const json& j, std::size_t index) {
  if (!j.is_object()) return Status::DataLoss(StrCat("flight recorder dump: entries[", index, "] is not an object"));
  Reader r(j, StrCat("entries[", index, "]"));
  FlightRecord e;
  COMMKIT_ASSIGN_OR_RETURN(e.sequence, r.Integer<std::uint64_t>("seq"));
  COMMKIT_ASSIGN_OR_RETURN(e.p2p, r.Bool("p2p", false));
  COMMKIT_ASSIGN_OR_RETURN(e.kind, r.Name<CollectiveKind>("op", 0, kNumCollectiveKinds));
  COMMKIT_ASSIGN_OR_RETURN(e.dtype, r.Name<DataType>("dtype", 0, kNumDataTypes));
  COMMKIT_ASSIGN_OR_RETURN(e.count, r.Integer<std::uint64_t>("count"));
  COMMKIT_ASSIGN_OR_RETURN(e.reduce, r.Name<ReduceKind>("reduce", 0, kNumReduceKinds, ReduceKind::kSum));
  COMMKIT_ASSIGN_OR_RETURN(e.root, r.Integer<int>("root", 0));
  COMMKIT_ASSIGN_OR_RETURN(e.peer, r.Integer<int>("peer", -1));
  COMMKIT_ASSIGN_OR_RETURN(e.tag, r.Integer<int>("tag", 0));
  COMMKIT_ASSIGN_OR_RETURN(e.memory, r.Name<MemoryKind>("memory", 0, 2, MemoryKind::kHost));
  COMMKIT_ASSIGN_OR_RETURN(std::string fp, r.String("fingerprint", std::string("0")));
  e.fingerprint = std::strtoull(fp.c_str(), nullptr, 16);
  COMMKIT_ASSIGN_OR_RETURN(e.state, r.Name<FlightState>("state", 1, 4));
  COMMKIT_ASSIGN_OR_RETURN(e.error, r.Name<StatusCode>("error", 0, static_cast<int>(StatusCode::kInternal) + 1,
                                                       e.state == FlightState::kFailed ? StatusCode::kInternal
                                                                                       : StatusCode::kOk));
  COMMKIT_ASSIGN_OR_RETURN(e.enqueued_ns, r.Integer<std::int64_t>("enqueued_ns", 0));
  COMMKIT_ASSIGN_OR_RETURN(e.started_ns, r.Integer<std::int64_t>("started_ns", 0));
  COMMKIT_ASSIGN_OR_RETURN(e.ended_ns, r.Integer<std::int64_t>("ended_ns", 0));
  return e;
}

}  // namespace

std::string FlightDumpToJson(const FlightDump& d) {
  json entries = json::array();
  for (const FlightRecord& e : d.entries) entries.push_back(EntryToJson(e));
  json body = {{"version", d.version},
               {"rank", d.rank},
               {"world_size", d.world_size},
               {"group", d.group},
               {"backend", d.backend},
               {"host", d.host},
               {"pid", d.pid},
               {"job", d.job},
               {"reason", d.reason},
               {"failure", d.failure},
               {"dumped_ns", d.dumped_ns},
               {"capacity", d.capacity},
               {"collectives", d.collectives},
               {"p2p_operations", d.p2p_operations},
               {"entries", std::move(entries)}};
  json doc;
  doc[std::string(kFlightRecorderKey)] = std::move(body);
  // Invalid UTF-8 (a host name, a message) is replaced rather than failing the dump.
  return doc.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
}

Result<FlightDump> ParseFlightDump(std::string_view text) {
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return Status::DataLoss(StrCat("flight recorder dump: not valid JSON: ", e.what()));
  }
  if (!doc.is_object() || !doc.contains(std::string(kFlightRecorderKey)))
    return Status::DataLoss(StrCat("flight recorder dump: no top-level \"", kFlightRecorderKey,
                                   "\" object: not a commkit flight recorder dump"));
  const json& body = doc[std::string(kFlightRecorderKey)];
  if (!body.is_object()) return Status::DataLoss(StrCat("flight recorder dump: \"", kFlightRecorderKey, "\" is not an object"));
  Reader r(body, std::string(kFlightRecorderKey));
  FlightDump d;
  COMMKIT_ASSIGN_OR_RETURN(d.version, r.Integer<int>("version"));
  if (d.version < 1 || d.version > kFlightRecorderVersion)
    return Status::DataLoss(StrCat("flight recorder dump: version ", d.version, " is not supported (this build reads 1 to ",
                                   kFlightRecorderVersion, "): use a gpudoctor as new as the job's commkit"));
  COMMKIT_ASSIGN_OR_RETURN(d.rank, r.Integer<int>("rank"));
  COMMKIT_ASSIGN_OR_RETURN(d.world_size, r.Integer<int>("world_size"));
  if (d.world_size < 1 || d.rank < 0 || d.rank >= d.world_size)
    return r.Error("rank", StrCat("is ", d.rank, ", outside the world of ", d.world_size, " ranks"));
  COMMKIT_ASSIGN_OR_RETURN(d.group, r.String("group"));
  COMMKIT_ASSIGN_OR_RETURN(d.backend, r.String("backend", std::string()));
  COMMKIT_ASSIGN_OR_RETURN(d.host, r.String("host", std::string()));
  COMMKIT_ASSIGN_OR_RETURN(d.job, r.String("job", std::string()));
  COMMKIT_ASSIGN_OR_RETURN(d.reason, r.String("reason", std::string()));
  COMMKIT_ASSIGN_OR_RETURN(d.failure, r.String("failure", std::string()));
  COMMKIT_ASSIGN_OR_RETURN(d.pid, r.Integer<std::int64_t>("pid", 0));
  COMMKIT_ASSIGN_OR_RETURN(d.dumped_ns, r.Integer<std::int64_t>("dumped_ns", 0));
  COMMKIT_ASSIGN_OR_RETURN(d.capacity, r.Integer<std::uint64_t>("capacity", 0));
  COMMKIT_ASSIGN_OR_RETURN(d.collectives, r.Integer<std::uint64_t>("collectives", 0));
  COMMKIT_ASSIGN_OR_RETURN(d.p2p_operations, r.Integer<std::uint64_t>("p2p_operations", 0));
  const json* entries = r.Find("entries");
  if (entries == nullptr || !entries->is_array()) return r.Error("entries", "must be an array");
  d.entries.reserve(entries->size());
  for (std::size_t i = 0; i < entries->size(); ++i) {
    COMMKIT_ASSIGN_OR_RETURN(FlightRecord e, EntryFromJson((*entries)[i], i));
    d.entries.push_back(e);
  }
  return d;
}

}  // namespace commkit
