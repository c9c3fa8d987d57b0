#include "commkit/comm/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "commkit/comm/launch_env.h"
#include "commkit/common/env.h"
#include "commkit/common/log.h"
#include "commkit/common/strings.h"
#include "flight_clock.h"

namespace commkit {

// ---- PrometheusText ----

void PrometheusText::Family(std::string_view name, std::string_view type, std::string_view help) {
  out_ += StrCat("# HELP ", name, " ", EscapeHelp(help), "\n# TYPE ", name, " ", type, "\n");
}

void PrometheusText::Sample(std::string_view name, const Labels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out_ += ',';
      out_ += StrCat(labels[i].first, "=\"", EscapeLabelValue(labels[i].second), "\"");
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += FormatValue(value);
  out_ += '\n';
}

std::string PrometheusText::EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string PrometheusText::EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string PrometheusText::FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 9.007199254740992e15)
    return std::to_string(static_cast<std::int64_t>(value));
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(value);
}

bool PrometheusText::IsValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool PrometheusText::IsValidLabelName(std::string_view name) {
  return IsValidMetricName(name) && name.find(':') == std::string_view::npos;
}

// ---- LatencyHistogram / GroupMetrics ----

int LatencyHistogram::BucketOf(std::int64_t nanoseconds) {
  if (nanoseconds <= 1000) return 0;
  const auto us = static_cast<std::uint64_t>((nanoseconds + 999) / 1000);  // rounded up
  return std::min(static_cast<int>(std::bit_width(us - 1)), kBuckets);  // smallest i with us <= 2^i
}

std::array<std::uint64_t, LatencyHistogram::kBuckets + 1> LatencyHistogram::Counts() const {
  std::array<std::uint64_t, kBuckets + 1> out{};
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = counts_[i].load(std::memory_order_relaxed);
  return out;
}

GroupMetrics::GroupMetrics(Labels labels) : labels_(std::move(labels)) {
  flight_clock::Init();
  last_progress_ticks_.store(flight_clock::Now(), std::memory_order_relaxed);
}

std::uint64_t GroupMetrics::Count(CollectiveKind kind) const {
  return kinds_[static_cast<std::size_t>(kind)].finished.load(std::memory_order_relaxed);
}
std::uint64_t GroupMetrics::Bytes(CollectiveKind kind) const {
  return kinds_[static_cast<std::size_t>(kind)].bytes.load(std::memory_order_relaxed);
}
std::uint64_t GroupMetrics::Failures(CollectiveKind kind) const {
  return kinds_[static_cast<std::size_t>(kind)].failures.load(std::memory_order_relaxed);
}
std::uint64_t GroupMetrics::InFlight() const {
  std::uint64_t n = 0;
  for (const PerKind& k : kinds_) {
    // finished first: a completion between the two loads cannot make the difference negative.
    const std::uint64_t finished = k.finished.load(std::memory_order_relaxed);
    const std::uint64_t started = k.started.load(std::memory_order_relaxed);
    n += started > finished ? started - finished : 0;
  }
  return n;
}
std::int64_t GroupMetrics::LastProgressUnixNs() const {
  return flight_clock::ToUnixNanos(last_progress_ticks_.load(std::memory_order_relaxed));
}

namespace {

PrometheusText::Labels GroupLabels(const GroupMetrics& g) {
  return {{"group", g.labels().group}, {"rank", std::to_string(g.labels().rank)}, {"backend", g.labels().backend}};
}

PrometheusText::Labels With(PrometheusText::Labels labels, std::string key, std::string value) {
  labels.emplace_back(std::move(key), std::move(value));
  return labels;
}

}  // namespace

std::string RenderMetrics(const std::vector<std::shared_ptr<const GroupMetrics>>& groups, std::int64_t now_unix_ns) {
  PrometheusText out;
  auto kinds_used = [](const GroupMetrics& g) {
    std::vector<CollectiveKind> used;
    for (int k = 0; k < kNumCollectiveKinds; ++k)
      if (g.Count(static_cast<CollectiveKind>(k)) > 0) used.push_back(static_cast<CollectiveKind>(k));
    return used;
  };
  out.Family("commkit_group_size", "gauge", "Ranks in the process group (one series per group and rank of this process).");
  for (const auto& g : groups) out.Sample("commkit_group_size", GroupLabels(*g), g->labels().size);

  out.Family("commkit_collectives_total", "counter", "Operations completed (successfully or not), per collective.");
  for (const auto& g : groups)
    for (CollectiveKind k : kinds_used(*g))
      out.Sample("commkit_collectives_total", With(GroupLabels(*g), "op", std::string(ToString(k))),
                 static_cast<double>(g->Count(k)));

  out.Family("commkit_collective_failures_total", "counter", "Operations that completed with an error, per collective.");
  for (const auto& g : groups)
    for (CollectiveKind k : kinds_used(*g))
      out.Sample("commkit_collective_failures_total", With(GroupLabels(*g), "op", std::string(ToString(k))),
                 static_cast<double>(g->Failures(k)));

  out.Family("commkit_collective_bytes_total", "counter", "Payload bytes of completed operations (elements times element size), per collective.");
  for (const auto& g : groups)
    for (CollectiveKind k : kinds_used(*g))
      out.Sample("commkit_collective_bytes_total", With(GroupLabels(*g), "op", std::string(ToString(k))),
                 static_cast<double>(g->Bytes(k)));

  out.Family("commkit_collective_latency_seconds", "histogram", "Time from an operation's start to its completion, per collective.");
  for (const auto& g : groups) {
    for (CollectiveKind k : kinds_used(*g)) {
      const auto labels = With(GroupLabels(*g), "op", std::string(ToString(k)));
      const auto counts = g->Latency(k).Counts();
      std::uint64_t cumulative = 0;
      for (int b = 0; b < LatencyHistogram::kBuckets; ++b) {
        cumulative += counts[static_cast<std::size_t>(b)];
        out.Sample("commkit_collective_latency_seconds_bucket",
                   With(labels, "le", PrometheusText::FormatValue(LatencyHistogram::UpperBoundSeconds(b))),
                   static_cast<double>(cumulative));
      }
      cumulative += counts[LatencyHistogram::kBuckets];
      out.Sample("commkit_collective_latency_seconds_bucket", With(labels, "le", "+Inf"), static_cast<double>(cumulative));
      out.Sample("commkit_collective_latency_seconds_sum", labels, g->Latency(k).SumSeconds());
      out.Sample("commkit_collective_latency_seconds_count", labels, static_cast<double>(cumulative));
    }
  }

  out.Family("commkit_operations_in_flight", "gauge", "Operations started and not yet completed.");
  for (const auto& g : groups) out.Sample("commkit_operations_in_flight", GroupLabels(*g), static_cast<double>(g->InFlight()));

  out.Family("commkit_last_progress_timestamp_seconds", "gauge",
             "Unix time of the last completed operation (the group's creation before the first).");
  for (const auto& g : groups)
    out.Sample("commkit_last_progress_timestamp_seconds", GroupLabels(*g), static_cast<double>(g->LastProgressUnixNs()) * 1e-9);

  out.Family("commkit_seconds_since_last_progress", "gauge",
             "Seconds since the last completed operation; growing while operations are in flight means a hang.");
  for (const auto& g : groups)
    out.Sample("commkit_seconds_since_last_progress", GroupLabels(*g),
               std::max<double>(0.0, static_cast<double>(now_unix_ns - g->LastProgressUnixNs()) * 1e-9));
  return out.str();
}

// ---- MetricsRegistry ----

struct MetricsRegistry::State {
  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<std::shared_ptr<const GroupMetrics>> groups;
  std::thread writer;
  std::uint64_t generation = 0;  // a writer runs while the generation it started with is current
  bool warned = false;
  bool atexit_registered = false;
  std::string path;
  std::chrono::milliseconds interval{15000};
};

MetricsRegistry::MetricsRegistry() : state_(new State) {}

MetricsRegistry& MetricsRegistry::Get() {
  static MetricsRegistry* registry = new MetricsRegistry();  // process lifetime: groups may outlive statics
  return *registry;
}

Result<std::string> MetricsRegistry::FileFromEnvironment() {
  COMMKIT_ASSIGN_OR_RETURN(std::optional<std::string> file, EnvString("COMMKIT_METRICS_FILE"));
  if (!file || file->empty()) return std::string();
  std::string path = *file;
  auto replace = [&](std::string_view token, const std::string& value) {
    for (std::size_t at = path.find(token); at != std::string::npos; at = path.find(token, at + value.size()))
      path.replace(at, token.size(), value);
  };
  if (path.find("{rank}") != std::string::npos) {
    auto launch = DetectLaunchEnvironment();
    if (!launch.ok()) return launch.status().WithContext("COMMKIT_METRICS_FILE uses {rank}");
    replace("{rank}", std::to_string(launch->rank));
  }
  replace("{pid}", std::to_string(::getpid()));
  return path;
}

Status MetricsRegistry::CheckEnvironment() {
  COMMKIT_RETURN_IF_ERROR(FileFromEnvironment().status());
  auto interval = EnvDurationOr("COMMKIT_METRICS_INTERVAL", std::chrono::seconds(15));
  COMMKIT_RETURN_IF_ERROR(interval.status());
  if (*interval < std::chrono::milliseconds(100))
    return Status::InvalidArgument(StrCat("COMMKIT_METRICS_INTERVAL=", interval->count(),
                                          "ms is too short: give at least 100ms (e.g. 15s)"));
  return Status::Ok();
}

Status MetricsRegistry::WriteFile(const std::filesystem::path& path, std::string_view text) {
  static std::atomic<std::uint64_t> counter{0};
  const std::string tmp = StrCat(path.string(), ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return Status::FromErrno(errno, StrCat("cannot create ", tmp));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status::FromErrno(err, StrCat("cannot write ", tmp));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::FromErrno(err, StrCat("cannot write ", tmp));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::FromErrno(err, StrCat("cannot rename ", tmp, " to ", path.string()));
  }
  return Status::Ok();
}

std::string MetricsRegistry::Render() const {
  std::vector<std::shared_ptr<const GroupMetrics>> groups;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    groups = state_->groups;
  }
  return RenderMetrics(groups, UnixNanos());
}

namespace {

// Writes the file (the registry's state mutex held by the caller or not: Render takes it).
void WriteNow(MetricsRegistry& registry, MetricsRegistry::State& state, const std::string& path) {
  Status s = MetricsRegistry::WriteFile(path, registry.Render());
  if (s.ok()) return;
  std::lock_guard<std::mutex> lock(state.mu);
  if (!state.warned) COMMKIT_LOG_WARN("COMMKIT_METRICS_FILE: ", s.message(), " (further errors not logged)");
  state.warned = true;
}

}  // namespace

void MetricsRegistry::Register(std::shared_ptr<const GroupMetrics> metrics) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  s.groups.push_back(std::move(metrics));
  if (s.groups.size() != 1 || s.writer.joinable()) return;
  // First live group: start the periodic writer when a file is configured (validated by Create()).
  s.path = FileFromEnvironment().value_or("");
  s.interval = EnvDurationOr("COMMKIT_METRICS_INTERVAL", std::chrono::seconds(15)).value_or(std::chrono::seconds(15));
  if (s.path.empty()) return;
  if (!s.atexit_registered) {
    s.atexit_registered = true;
    // A process that exits with groups still alive (leaked, or exit() from a callback) still leaves
    // its last values in the file.
    std::atexit([] {
      MetricsRegistry& r = MetricsRegistry::Get();
      std::string path;
      {
        std::lock_guard<std::mutex> l(r.state_->mu);
        if (r.state_->groups.empty() || r.state_->path.empty()) return;
        path = r.state_->path;
      }
      (void)WriteFile(path, r.Render());
    });
  }
  const std::uint64_t generation = ++s.generation;
  s.writer = std::thread([this, generation] {
    State& st = *state_;
    std::unique_lock<std::mutex> l(st.mu);
    while (st.generation == generation) {
      const std::string path = st.path;
      l.unlock();
      WriteNow(*this, st, path);
      l.lock();
      st.cv.wait_for(l, st.interval, [&] { return st.generation != generation; });
    }
  });
}

void MetricsRegistry::Unregister(const GroupMetrics* metrics) {
  State& s = *state_;
  std::thread writer;
  std::string path;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    path = s.path;
  }
  // The group's final values reach the file before it disappears from it.
  if (!path.empty()) WriteNow(*this, s, path);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.groups.erase(std::remove_if(s.groups.begin(), s.groups.end(),
                                  [&](const auto& g) { return g.get() == metrics; }),
                   s.groups.end());
    if (!s.groups.empty() || !s.writer.joinable()) return;
    ++s.generation;
    writer = std::move(s.writer);
  }
  s.cv.notify_all();
  writer.join();
}

}  // namespace commkit
