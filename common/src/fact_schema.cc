#include "commkit/common/fact_schema.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "commkit/common/strings.h"

namespace commkit {
namespace {

using Check = std::function<Status(std::string_view)>;

Status Bad(std::string why) { return Status::DataLoss(std::move(why)); }

bool IsUnsigned(std::string_view s) {
  return !s.empty() && s.size() <= 20 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool IsIp(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

bool OneLine(std::string_view s) { return s.find('\n') == std::string_view::npos; }

// "key1=V key2=V" with exactly these keys in this order; each value passes `ok`.
Status KeyValues(std::string_view v, std::initializer_list<std::string_view> keys,
                 const std::function<bool(std::string_view)>& ok, std::string_view expected) {
  auto parts = Split(v, ' ', /*skip_empty=*/true);
  bool good = parts.size() == keys.size() && OneLine(v);
  std::size_t i = 0;
  for (std::string_view k : keys) {
    if (!good) break;
    std::string_view p = parts[i++];
    good = StartsWith(p, StrCat(k, "=")) && ok(p.substr(k.size() + 1));
  }
  return good ? Status::Ok() : Bad(StrCat("expected '", expected, "'"));
}

Status JsonNumbersUsable(const nlohmann::json& j, int depth) {
  if (depth > 64) return Bad("JSON nested deeper than 64 levels");
  if (j.is_number_float()) {
    const double d = j.get<double>();
    if (!std::isfinite(d) || std::fabs(d) >= 2147483648.0) return Bad(StrCat("JSON number ", j.dump(), " is out of range"));
  }
  if (j.is_structured())
    for (const auto& e : j) COMMKIT_RETURN_IF_ERROR(JsonNumbersUsable(e, depth + 1));
  return Status::Ok();
}

Status JsonObject(std::string_view v) {
  nlohmann::json j = nlohmann::json::parse(v, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Bad("not one JSON object");
  return JsonNumbersUsable(j, 0);
}

const std::map<std::string, Check, std::less<>>& Schemas() {
  static const auto* schemas = new std::map<std::string, Check, std::less<>>{
      {"env",
       [](std::string_view v) {
         for (const auto& line : Split(v, '\n', true)) {
           auto eq = line.find('=');
           bool ok = eq != std::string::npos && eq > 0 &&
                     (std::isalpha(static_cast<unsigned char>(line[0])) || line[0] == '_') &&
                     std::all_of(line.begin(), line.begin() + static_cast<std::ptrdiff_t>(eq),
                                 [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
           if (!ok) return Bad(StrCat("line '", line, "' is not NAME=value"));
         }
         return Status::Ok();
       }},
      {"statvfs.dev_shm",
       [](std::string_view v) { return KeyValues(v, {"total", "avail"}, IsUnsigned, "total=<bytes> avail=<bytes>"); }},
      {"rlimit.memlock",
       [](std::string_view v) {
         return KeyValues(v, {"soft", "hard"}, [](std::string_view x) { return x == "unlimited" || IsUnsigned(x); },
                          "soft=<bytes|unlimited> hard=<bytes|unlimited>");
       }},
      {"hostname",
       [](std::string_view v) {
         bool ok = !v.empty() && v.size() <= 255 && std::all_of(v.begin(), v.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
         });
         return ok ? Status::Ok() : Bad("not a host name (letters, digits, '-', '.', '_')");
       }},
      {"hostname.addresses",
       [](std::string_view v) {
         if (!OneLine(v)) return Bad("expected one line of IP addresses");
         for (const auto& a : Split(v, ' ', true))
           if (!IsIp(a)) return Bad(StrCat("'", a, "' is not an IP address"));
         return Status::Ok();
       }},
      {"dlopen.nvml", [](std::string_view v) {
         return OneLine(v) && (StartsWith(v, "loaded ") || EndsWith(v, " not found")) ? Status::Ok()
                                                                                     : Bad("expected 'loaded <path>' or '<library> not found'");
       }},
      {"dlopen.cuda", [](std::string_view v) {
         return OneLine(v) && (StartsWith(v, "loaded ") || EndsWith(v, " not found")) ? Status::Ok()
                                                                                     : Bad("expected 'loaded <path>' or '<library> not found'");
       }},
      {"systemctl.nvidia-fabricmanager",
       [](std::string_view v) {
         bool ok = std::all_of(v.begin(), v.end(), [](char c) { return (c >= 'a' && c <= 'z') || c == '-'; });
         return ok ? Status::Ok() : Bad("expected a systemd unit state word (active, inactive, failed, ...)");
       }},
      {"nvml", JsonObject},
      {"cuda", JsonObject},
      {"hwloc", JsonObject},
      {"verbs", JsonObject},
      {"libfabric", JsonObject},
  };
  return *schemas;
}

}  // namespace

Status ValidateFact(std::string_view name, std::string_view value) {
  if (value.find('\0') != std::string_view::npos) return Bad("holds a NUL byte; facts are text");
  // Producers that cannot answer record "error: <why>" (see diagnostics/src/node_checks.cc).
  if (StartsWith(value, "error: ") && OneLine(value)) return Status::Ok();
  const auto& schemas = Schemas();
  auto it = schemas.find(name);
  if (it == schemas.end()) return Status::Ok();
  return it->second(value);
}

}  // namespace commkit
