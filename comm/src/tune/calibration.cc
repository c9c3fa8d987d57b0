// The calibration cache: measured alpha/beta per backend algorithm, one JSON file per host and
// commkit version, validated on every read (tuning.h, docs/tuning.md).
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>

#include "commkit/comm/tuning.h"
#include "commkit/common/config.h"
#include "commkit/common/env.h"
#include "commkit/common/file_io.h"
#include "commkit/common/strings.h"

namespace commkit::tune {

namespace {

constexpr std::string_view kFormat = "commkit-calibration";
constexpr int kFormatVersion = 1;
constexpr std::size_t kMaxCacheBytes = 1 << 20;
// Where the pieces of a piecewise fit may meet. Below 64 KiB a call is latency-bound and one line fits
// it; above, the cost per byte changes wherever the working set (inputs, outputs and the transport's
// staging, 3-4x the message) leaves a cache level, which on current CPUs lies anywhere from 256 KiB
// (L2) to tens of MiB (LLC), so the axis is cut every 4x there and the measurements decide.
constexpr double kCuts[] = {64.0 * 1024, 256.0 * 1024, 1024.0 * 1024, 4096.0 * 1024, 16384.0 * 1024};
constexpr int kNumCuts = static_cast<int>(sizeof(kCuts) / sizeof(kCuts[0]));

std::string HostnameImpl() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "unknown-host";
  std::string out;
  for (char c : std::string(name))  // a file name component: no separators or oddities
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_') ? c : '_';
  return out;
}

std::optional<CollectiveKind> CollectiveNamed(std::string_view name) {
  for (int k = 0; k < kNumCollectiveKinds; ++k)
    if (ToString(static_cast<CollectiveKind>(k)) == name) return static_cast<CollectiveKind>(k);
  return std::nullopt;
}

}  // namespace

std::string CalibrationHostname() { return HostnameImpl(); }

const Fit* Calibration::Find(std::string_view backend, CollectiveKind collective, CollectiveAlgorithm algorithm,
                             int ranks, std::size_t bytes) const {
  const Fit* nearest = nullptr;
  std::size_t nearest_gap = kNoLimit;
  for (const Fit& f : fits) {
    if (f.backend != backend || f.collective != collective || f.algorithm != algorithm || f.ranks != ranks) continue;
    if (bytes >= f.min_bytes && bytes < f.max_bytes) return &f;
    const std::size_t gap = bytes < f.min_bytes ? f.min_bytes - bytes : bytes - f.max_bytes;
    if (gap < nearest_gap) {
      nearest_gap = gap;
      nearest = &f;
    }
  }
  return nearest;
}

std::filesystem::path CalibrationPath() {
  if (auto v = EnvRaw("COMMKIT_TUNE_CACHE"); v && !v->empty()) {
    if (ToLower(*v) == "off") return {};
    return std::filesystem::path(*v);
  }
  std::filesystem::path dir;
  if (auto x = EnvRaw("XDG_CACHE_HOME"); x && !x->empty() && (*x)[0] == '/') {
    dir = std::filesystem::path(*x) / "commkit";
  } else if (auto h = EnvRaw("HOME"); h && !h->empty()) {
    dir = std::filesystem::path(*h) / ".cache" / "commkit";
  } else {
    return {};
  }
  return dir / StrCat("calibration-", CalibrationHostname(), "-", COMMKIT_VERSION_STRING, ".json");
}

std::string SerializeCalibration(const Calibration& c) {
  nlohmann::json j;
  j["format"] = kFormat;
  j["format_version"] = kFormatVersion;
  j["hostname"] = c.hostname;
  j["commkit_version"] = c.version;
  j["created"] = c.created;
  j["note"] = "measured by commkit-bench --calibrate; safe to delete (docs/tuning.md)";
  nlohmann::json fits = nlohmann::json::array();
  for (const Fit& f : c.fits) {
    nlohmann::json e;
    e["backend"] = f.backend;
    e["collective"] = ToString(f.collective);
    e["algorithm"] = ToString(f.algorithm);
    e["ranks"] = f.ranks;
    e["min_bytes"] = f.min_bytes;
    if (f.max_bytes != kNoLimit) e["max_bytes"] = f.max_bytes;
    e["alpha_s"] = f.alpha_s;
    e["beta_Bps"] = f.beta_Bps;
    e["samples"] = f.samples;
    fits.push_back(std::move(e));
  }
  j["fits"] = std::move(fits);
  return j.dump(1) + "\n";
}

Result<Calibration> ParseCalibration(std::string_view text, std::string_view origin) {
  auto bad = [&](const std::string& what) {
    return Status::InvalidArgument(StrCat("calibration cache ", origin, ": ", what,
                                          "; delete the file or run commkit-bench --calibrate again"));
  };
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  auto str = [&](const nlohmann::json& o, const char* key) -> std::optional<std::string> {
    auto it = o.find(key);
    if (it == o.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  if (str(j, "format") != std::string(kFormat)) return bad("not a commkit calibration file (format field)");
  auto fv = j.find("format_version");
  if (fv == j.end() || !fv->is_number_integer() || fv->get<long long>() != kFormatVersion)
    return bad(StrCat("format_version is not ", kFormatVersion, " (written by another commkit)"));
  Calibration c;
  c.hostname = str(j, "hostname").value_or("");
  c.version = str(j, "commkit_version").value_or("");
  c.created = str(j, "created").value_or("");
  auto fits = j.find("fits");
  if (fits == j.end() || !fits->is_array()) return bad("no fits array");
  if (fits->size() > 4096) return bad(StrCat(fits->size(), " fits, more than any calibration writes"));
  for (std::size_t i = 0; i < fits->size(); ++i) {
    const nlohmann::json& e = (*fits)[i];
    const std::string at = StrCat("fits[", i, "]");
    if (!e.is_object()) return bad(StrCat(at, " is not an object"));
    Fit f;
    f.backend = str(e, "backend").value_or("");
    if (f.backend.empty() || f.backend.size() > 64) return bad(StrCat(at, ": missing or odd backend"));
    auto coll = CollectiveNamed(str(e, "collective").value_or(""));
    if (!coll) return bad(StrCat(at, ": unknown collective"));
    f.collective = *coll;
    auto algo = ParseCollectiveAlgorithm(str(e, "algorithm").value_or(""));
    if (!algo.ok()) return bad(StrCat(at, ": unknown algorithm"));
    f.algorithm = *algo;
    auto num = [&](const char* key, double& out) {
      auto it = e.find(key);
      if (it == e.end() || !it->is_number()) return false;
      out = it->get<double>();
      return std::isfinite(out);
    };
    double ranks = 0, alpha = 0, beta = 0, samples = 0, lo = 0, hi = -1;
    if (!num("ranks", ranks) || ranks < 1 || ranks > (1 << 24) || !num("alpha_s", alpha) || alpha < -3600 || alpha > 3600 ||
        !num("beta_Bps", beta) || !(beta > 0) || !num("samples", samples) || samples < 0 || !num("min_bytes", lo) ||
        lo < 0 || lo > 1e18)
      return bad(StrCat(at, ": ranks, alpha_s, beta_Bps, samples and min_bytes must be present and in range"));
    if (e.contains("max_bytes") && (!num("max_bytes", hi) || hi <= lo || hi > 1e18))
      return bad(StrCat(at, ": max_bytes must be above min_bytes"));
    f.ranks = static_cast<int>(ranks);
    f.alpha_s = alpha;
    f.beta_Bps = beta;
    f.samples = static_cast<int>(std::min(samples, 1e9));
    f.min_bytes = static_cast<std::size_t>(lo);
    f.max_bytes = hi < 0 ? kNoLimit : static_cast<std::size_t>(hi);
    c.fits.push_back(std::move(f));
  }
  return c;
}

Result<std::optional<Calibration>> LoadCalibration(const std::filesystem::path& path) {
  if (path.empty()) return std::optional<Calibration>();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<Calibration>();
  auto text = ReadRegularFile(path, kMaxCacheBytes, "calibration cache");
  if (!text.ok()) return text.status().WithContext("reading the calibration cache (delete it or recalibrate)");
  COMMKIT_ASSIGN_OR_RETURN(Calibration c, ParseCalibration(*text, path.string()));
  if (c.version != COMMKIT_VERSION_STRING)
    return Status::InvalidArgument(StrCat("calibration cache ", path.string(), " was measured by commkit ",
                                             c.version.empty() ? "(unknown)" : c.version, ", this is ",
                                             COMMKIT_VERSION_STRING, "; run commkit-bench --calibrate again"));
  if (c.hostname != CalibrationHostname())
    return Status::InvalidArgument(StrCat("calibration cache ", path.string(), " was measured on host '", c.hostname,
                                             "', this is '", CalibrationHostname(), "'; run commkit-bench --calibrate here"));
  return std::optional<Calibration>(std::move(c));
}

Status SaveCalibration(const std::filesystem::path& path, const Calibration& calibration) {
  if (path.empty())
    return Status::InvalidArgument("calibration cache: no path (set HOME, XDG_CACHE_HOME or COMMKIT_TUNE_CACHE)");
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  if (ec)
    return Status::Unavailable(StrCat("calibration cache: cannot create ", path.parent_path().string(), ": ",
                                      ec.message(), " (set COMMKIT_TUNE_CACHE to a writable file)"));
  const std::filesystem::path tmp = path.string() + StrCat(".tmp.", ::getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << SerializeCalibration(calibration);
    if (!f.flush())
      return Status::Unavailable(StrCat("calibration cache: cannot write ", tmp.string(),
                                        " (set COMMKIT_TUNE_CACHE to a writable file)"));
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return Status::Unavailable(StrCat("calibration cache: cannot rename into ", path.string()));
  }
  return Status::Ok();
}

Fit FitSamples(const std::vector<std::pair<double, double>>& samples, double from_bytes) {
  // Timings on a shared machine carry stalls of whole scheduler slices: a least-squares fit follows
  // them. The fit minimises the sum of |log(predicted / measured)| instead (a median-like criterion:
  // a few stalled sizes do not move it), over candidates where the line passes through one or two
  // samples, which is where an L1 optimum lies.
  std::vector<std::pair<double, double>> s;
  for (const auto& [n, t] : samples)
    if (t > 0 && std::isfinite(t) && n >= 0 && std::isfinite(n)) s.emplace_back(n, t);
  Fit f;
  f.samples = static_cast<int>(s.size());
  if (s.empty()) return f;
  std::pair<double, double> first = s[0];
  for (const auto& sample : s)
    if (sample.first < first.first) first = sample;
  if (!(from_bytes >= 0) || from_bytes > first.first) from_bytes = first.first;
  // The line is used from `from_bytes` on, so it must not promise there more than the smallest sample
  // shows: no time below that sample's time scaled down with the size. This allows a negative alpha
  // where the time grows faster than the size (a cache knee inside the piece) but never a line that
  // dives towards zero below the measured sizes, which would win every comparison there.
  const double floor_s = first.second * (first.first > 0 ? from_bytes / first.first : 1.0);
  auto cost = [&](double alpha, double g) {
    double e = 0;
    for (const auto& [n, t] : s) e += std::abs(std::log((alpha + n * g) / t));
    return e;
  };
  double best_alpha = s[0].second, best_g = 0, best = cost(best_alpha, 0);
  auto consider = [&](double alpha, double g) {
    if (!(g >= 0) || !std::isfinite(alpha) || !std::isfinite(g)) return;
    if (!(alpha + from_bytes * g >= floor_s) || !(alpha + std::max(from_bytes, 1.0) * g > 0)) return;
    const double c = cost(alpha, g);
    if (c < best) {
      best = c;
      best_alpha = alpha;
      best_g = g;
    }
  };
  for (std::size_t i = 0; i < s.size() && i < 64; ++i) {
    consider(s[i].second, 0);                                   // latency only
    if (s[i].first > 0) consider(0, s[i].second / s[i].first);  // bandwidth only
    for (std::size_t j = i + 1; j < s.size() && j < 64; ++j) {  // through two samples
      const double dn = s[j].first - s[i].first;
      if (dn == 0) continue;
      const double g = (s[j].second - s[i].second) / dn;
      consider(s[i].second - g * s[i].first, g);
    }
  }
  f.alpha_s = best_alpha;
  f.beta_Bps = best_g > 0 ? 1 / best_g : 1e15;  // no measurable per-byte cost: bandwidth effectively unlimited
  return f;
}

std::vector<Fit> FitPieces(const Fit& key, const std::vector<std::pair<double, double>>& samples) {
  struct Piece {
    double lo, hi;
    std::vector<std::pair<double, double>> samples;
  };
  std::vector<Piece> pieces;
  double lo = 0;
  for (int i = 0; i <= kNumCuts; ++i) {
    const double hi = i < kNumCuts ? kCuts[i] : 1e300;
    Piece p{lo, hi, {}};
    for (const auto& s : samples)
      if (s.first >= lo && s.first < hi) p.samples.push_back(s);
    if (p.samples.empty()) continue;  // the next piece starts where the last one ended
    pieces.push_back(std::move(p));
    lo = hi;
  }
  if (!pieces.empty()) pieces.back().hi = 1e300;
  // One sample cannot tell latency from bandwidth: such a piece joins the next one up (the last one
  // joins the one below), so a sweep with -f 4 still gets pieces of two or more sizes.
  for (std::size_t i = 0; i < pieces.size() && pieces.size() > 1;) {
    if (pieces[i].samples.size() >= 2) {
      ++i;
      continue;
    }
    const std::size_t into = i + 1 < pieces.size() ? i + 1 : i - 1;
    Piece& dst = pieces[into];
    dst.lo = std::min(dst.lo, pieces[i].lo);
    dst.hi = std::max(dst.hi, pieces[i].hi);
    dst.samples.insert(dst.samples.end(), pieces[i].samples.begin(), pieces[i].samples.end());
    pieces.erase(pieces.begin() + static_cast<std::ptrdiff_t>(i));
    if (into < i) break;  // the last piece joined the one below: done
  }
  std::vector<Fit> out;
  for (const Piece& p : pieces) {
    Fit f = FitSamples(p.samples, p.lo);
    f.backend = key.backend;
    f.collective = key.collective;
    f.algorithm = key.algorithm;
    f.ranks = key.ranks;
    f.min_bytes = static_cast<std::size_t>(p.lo);
    f.max_bytes = p.hi >= 1e300 ? kNoLimit : static_cast<std::size_t>(p.hi);
    out.push_back(std::move(f));
  }
  return out;
}

double PredictSeconds(const Fit& fit, double bytes) {
  // A negative alpha (see FitSamples) never predicts below a nanosecond at sizes under the piece.
  return std::max(1e-9, fit.alpha_s + (fit.beta_Bps > 0 ? std::max(0.0, bytes) / fit.beta_Bps : 0));
}

}  // namespace commkit::tune
