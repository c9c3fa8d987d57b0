#include "commkit/diagnostics/flight_record.h"

#include <algorithm>
#include <map>
#include <set>

#include "commkit/common/file_io.h"
#include "commkit/common/strings.h"

namespace commkit::diagnostics {

std::string_view ToString(FlightFindingKind kind) {
  switch (kind) {
    case FlightFindingKind::kDiverged: return "diverged";
    case FlightFindingKind::kStopped: return "stopped";
    case FlightFindingKind::kMissing: return "missing";
    case FlightFindingKind::kFailed: return "failed";
    case FlightFindingKind::kStuck: return "stuck";
  }
  return "?";
}

bool IsFlightRecordDocument(std::string_view text) {
  auto skip = [&](std::size_t i) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t')) ++i;
    return i;
  };
  std::size_t i = skip(0);
  if (i >= text.size() || text[i] != '{') return false;
  i = skip(i + 1);
  const std::string key = StrCat("\"", kFlightRecorderKey, "\"");
  return text.substr(i, key.size()) == key;
}

Result<LoadedFlightDumps> LoadFlightDumps(const std::vector<std::filesystem::path>& paths) {
  LoadedFlightDumps out;
  auto load = [&](const std::filesystem::path& file, bool from_dir) -> Status {
    auto text = ReadRegularFile(file, kMaxFlightDumpBytes, "flight recorder dump");
    if (!text.ok()) return text.status();
    if (from_dir && !IsFlightRecordDocument(*text)) {
      out.warnings.push_back(StrCat(file.string(), ": not a flight recorder dump, skipped"));
      return Status::Ok();
    }
    auto dump = ParseFlightDump(*text);
    if (!dump.ok()) return dump.status().WithContext(file.string());
    dump->source = file.string();
    out.dumps.push_back(std::move(*dump));
    return Status::Ok();
  };
  for (const auto& path : paths) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      std::vector<std::filesystem::path> files;
      for (const auto& entry : std::filesystem::directory_iterator(path, ec))
        if (entry.path().extension() == ".json") files.push_back(entry.path());
      if (ec) return Status::SystemError(StrCat("cannot list ", path.string(), ": ", ec.message()));
      std::sort(files.begin(), files.end());
      if (files.empty()) out.warnings.push_back(StrCat(path.string(), ": no *.json file"));
      for (const auto& f : files) COMMKIT_RETURN_IF_ERROR(load(f, true));
    } else {
      COMMKIT_RETURN_IF_ERROR(load(path, false));
    }
  }
  if (out.dumps.empty())
    return Status::InvalidArgument(StrCat("no flight recorder dump in ", paths.size(), " path(s): pass the dump files "
                                          "(<group>-rank<N>.json) or their directory"));
  return out;
}

namespace {

bool IsRooted(CollectiveKind k) {
  return k == CollectiveKind::kBroadcast || k == CollectiveKind::kReduce || k == CollectiveKind::kGather ||
         k == CollectiveKind::kScatter;
}

// What must be equal on every rank at one sequence number.
struct Signature {
  CollectiveKind kind;
  DataType dtype;
  std::uint64_t count;
  int root;
  ReduceKind reduce;
  std::uint64_t fingerprint;
  auto Key() const { return std::make_tuple(kind, dtype, count, root, reduce, fingerprint); }
  bool operator<(const Signature& o) const { return Key() < o.Key(); }
  bool operator==(const Signature& o) const { return Key() == o.Key(); }
};

Signature SignatureOf(const FlightRecord& e) {
  // alltoallv's send counts legitimately differ per rank (the fingerprint leaves them out too).
  return {e.kind, e.dtype, e.kind == CollectiveKind::kAlltoallv ? 0 : e.count, IsRooted(e.kind) ? e.root : 0,
          IsReduction(e.kind) ? e.reduce : ReduceKind::kSum, e.fingerprint};
}

std::string Describe(const FlightRecord& e) {
  std::string s = StrCat(ToString(e.kind), " #", e.sequence, " (");
  if (e.kind == CollectiveKind::kBarrier) return StrCat(ToString(e.kind), " #", e.sequence);
  s += StrCat(ToString(e.dtype), " x ", e.count);
  if (IsReduction(e.kind)) s += StrCat(", ", ToString(e.reduce));
  if (IsRooted(e.kind)) s += StrCat(", root ", e.root);
  if (e.p2p) s += StrCat(", peer ", e.peer, ", tag ", e.tag);
  return s + ")";
}

std::string StateText(const FlightRecord& e) {
  if (e.state == FlightState::kFailed) return StrCat("failed (", commkit::ToString(e.error), ")");
  return std::string(ToString(e.state));
}

std::string Ranks(const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  // Consecutive ranks as ranges: "0-5, 7".
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    parts.push_back(j > i + 1 ? StrCat(ranks[i], "-", ranks[j]) : std::to_string(ranks[i]));
    if (j == i + 1) parts.push_back(std::to_string(ranks[j]));
    i = j + 1;
  }
  return StrCat(ranks.size() == 1 ? "rank " : "ranks ", Join(parts, ", "));
}

struct RankView {
  const FlightDump* dump = nullptr;
  std::map<std::uint64_t, const FlightRecord*> collectives;  // by sequence
  std::uint64_t last_enqueued = 0, last_started = 0, last_completed = 0;
};

RankView ViewOf(const FlightDump& d) {
  RankView v;
  v.dump = &d;
  for (const FlightRecord& e : d.entries) {
    if (e.p2p) continue;
    v.collectives[e.sequence] = &e;
    v.last_enqueued = std::max(v.last_enqueued, e.sequence);
    if (e.state != FlightState::kScheduled) v.last_started = std::max(v.last_started, e.sequence);
    if (e.state == FlightState::kCompleted) v.last_completed = std::max(v.last_completed, e.sequence);
  }
  v.last_enqueued = std::max(v.last_enqueued, d.collectives);
  return v;
}

FlightGroupVerdict AnalyzeGroup(const std::string& group, const std::vector<const FlightDump*>& dumps,
                                std::vector<std::string>& warnings) {
  FlightGroupVerdict g;
  g.group = group;
  for (const FlightDump* d : dumps) g.world_size = std::max(g.world_size, d->world_size);
  for (const FlightDump* d : dumps) {
    if (d->world_size != g.world_size)
      warnings.push_back(StrCat("group ", group, ": ", d->source, " says ", d->world_size, " ranks, others ",
                                g.world_size, ": dumps of different runs mixed?"));
    if (g.backend.empty()) g.backend = d->backend;
  }
  // One dump per rank: the newest.
  std::map<int, const FlightDump*> by_rank;
  for (const FlightDump* d : dumps) {
    auto [it, fresh] = by_rank.emplace(d->rank, d);
    if (fresh) continue;
    const FlightDump* keep = d->dumped_ns > it->second->dumped_ns ? d : it->second;
    warnings.push_back(StrCat("group ", group, " rank ", d->rank, ": two dumps (", it->second->source, ", ", d->source,
                              "): using the newer, ", keep->source));
    it->second = keep;
  }
  std::map<int, RankView> views;
  for (const auto& [rank, d] : by_rank) views[rank] = ViewOf(*d);

  std::vector<int> missing;
  for (int r = 0; r < g.world_size; ++r) {
    FlightRankSummary s;
    s.rank = r;
    auto it = views.find(r);
    if (it == views.end()) {
      missing.push_back(r);
      g.ranks.push_back(s);
      continue;
    }
    const RankView& v = it->second;
    s.present = true;
    s.host = v.dump->host;
    s.pid = v.dump->pid;
    s.source = v.dump->source;
    s.reason = v.dump->reason;
    s.last_enqueued = v.last_enqueued;
    s.last_started = v.last_started;
    s.last_completed = v.last_completed;
    if (!v.collectives.empty()) {
      const FlightRecord& last = *v.collectives.rbegin()->second;
      s.last_operation = Describe(last);
      s.last_state = StateText(last);
    }
    std::vector<std::string> pending;
    for (const FlightRecord& e : v.dump->entries)
      if (e.p2p && e.state != FlightState::kCompleted) pending.push_back(StrCat(Describe(e), " ", StateText(e)));
    s.pending_p2p = Join(pending, "; ");
    g.ranks.push_back(s);
  }

  // Diverged: the earliest sequence number at which the present ranks' records disagree.
  std::set<std::uint64_t> seqs;
  for (const auto& [r, v] : views)
    for (const auto& [seq, e] : v.collectives) seqs.insert(seq);
  for (std::uint64_t seq : seqs) {
    std::map<Signature, std::vector<int>> sides;
    std::map<Signature, const FlightRecord*> example;
    for (const auto& [r, v] : views) {
      auto it = v.collectives.find(seq);
      if (it == v.collectives.end()) continue;
      sides[SignatureOf(*it->second)].push_back(r);
      example.emplace(SignatureOf(*it->second), it->second);
    }
    if (sides.size() < 2) continue;
    // The largest side is taken as what the program meant; the others diverged.
    auto majority = std::max_element(sides.begin(), sides.end(), [](const auto& a, const auto& b) {
      return a.second.size() < b.second.size() || (a.second.size() == b.second.size() && a.second[0] > b.second[0]);
    });
    FlightFinding f;
    f.kind = FlightFindingKind::kDiverged;
    f.sequence = seq;
    f.others = majority->second;
    f.operation = Describe(*example[majority->first]);
    std::vector<std::string> parts;
    for (const auto& [sig, ranks] : sides) {
      if (sig == majority->first) continue;
      f.ranks.insert(f.ranks.end(), ranks.begin(), ranks.end());
      const FlightRecord& e = *example[sig];
      const FlightRecord& m = *example[majority->first];
      std::string how = Describe(e);
      if (SignatureOf(e).Key() != SignatureOf(m).Key() && e.kind == m.kind && e.dtype == m.dtype && e.count == m.count &&
          e.root == m.root && e.reduce == m.reduce)
        how += " with different per-rank counts";
      parts.push_back(StrCat(Ranks(ranks), " called ", how));
    }
    std::sort(f.ranks.begin(), f.ranks.end());
    f.message = StrCat("collective #", seq, ": ", Join(parts, "; "), ", while ", Ranks(f.others), " called ",
                       f.operation, ". Every rank must issue the same collectives in the same order: look for a "
                       "rank-dependent branch before this call.");
    g.findings.push_back(f);
    break;  // later differences follow from the first
  }

  // Stopped: ranks whose last collective is behind while others wait in the next one.
  std::uint64_t front = 0;
  for (const auto& [r, v] : views) front = std::max(front, v.last_enqueued);
  std::map<std::uint64_t, std::vector<int>> behind;  // last enqueued -> ranks
  for (const auto& [r, v] : views)
    if (v.last_enqueued < front) behind[v.last_enqueued].push_back(r);
  for (const auto& [last, ranks] : behind) {
    const std::uint64_t next = last + 1;
    std::vector<int> waiting;
    const FlightRecord* example = nullptr;
    bool anyone_waits = false;
    for (const auto& [r, v] : views) {
      auto it = v.collectives.find(next);
      if (it == v.collectives.end()) continue;
      waiting.push_back(r);
      if (example == nullptr) example = it->second;
      anyone_waits = anyone_waits || it->second->state != FlightState::kCompleted;
    }
    if (!anyone_waits) {
      warnings.push_back(StrCat("group ", group, ": ", Ranks(ranks), " dumped at collective #", last,
                                " while others completed #", next, ": the dumps were taken at different times"));
      continue;
    }
    FlightFinding f;
    f.kind = FlightFindingKind::kStopped;
    f.ranks = ranks;
    f.others = waiting;
    f.sequence = next;
    f.operation = example != nullptr ? Describe(*example) : StrCat("collective #", next);
    std::string last_text = "it recorded no collective";
    const RankView& v0 = views[ranks[0]];
    if (auto it = v0.collectives.find(last); it != v0.collectives.end())
      last_text = StrCat("its last collective was ", Describe(*it->second), ", ", StateText(*it->second));
    else if (last > 0)
      last_text = StrCat("its last collective was #", last);
    f.message = StrCat(Ranks(ranks), " never called ", f.operation, ", which ", Ranks(waiting),
                       waiting.size() == 1 ? " waits in" : " wait in", "; ", last_text,
                       ". Look at what it did after that call (its log; py-spy dump or gdb on pid ",
                       v0.dump->pid, v0.dump->host.empty() ? "" : StrCat(" on ", v0.dump->host), ").");
    g.findings.push_back(f);
  }

  if (!missing.empty()) {
    FlightFinding f;
    f.kind = FlightFindingKind::kMissing;
    f.ranks = missing;
    for (const auto& [r, v] : views) f.others.push_back(r);
    f.message = StrCat(Ranks(missing), " of ", g.world_size, " left no dump: the process died, hangs without "
                       "dumping (send it SIGUSR1), or its file was not collected (dumps are written on each "
                       "rank's own host).");
    if (behind.empty() && g.findings.empty() && front > 0)
      f.message += StrCat(" The ranks that dumped all reached collective #", front, ": the missing ones are the suspects.");
    g.findings.push_back(f);
  }

  // Everyone at the same front: did it fail, or does it hang inside the operation?
  if (g.findings.empty() && front > 0) {
    std::vector<int> failed, inside;
    std::map<std::string, std::vector<int>> errors;
    const FlightRecord* example = nullptr;
    for (const auto& [r, v] : views) {
      auto it = v.collectives.find(front);
      if (it == v.collectives.end()) continue;
      example = it->second;
      if (it->second->state == FlightState::kFailed) {
        failed.push_back(r);
        errors[std::string(commkit::ToString(it->second->error))].push_back(r);
      } else if (it->second->state != FlightState::kCompleted) {
        inside.push_back(r);
      }
    }
    if (!failed.empty()) {
      FlightFinding f;
      f.kind = FlightFindingKind::kFailed;
      f.ranks = failed;
      f.sequence = front;
      f.operation = Describe(*example);
      std::vector<std::string> parts;
      for (const auto& [err, ranks] : errors) parts.push_back(StrCat(Ranks(ranks), ": ", err));
      std::string detail;
      for (int r : failed)
        if (!views[r].dump->failure.empty()) {
          detail = StrCat(" Rank ", r, ": ", views[r].dump->failure);
          break;
        }
      f.message = StrCat("every rank reached ", f.operation, " (no rank stopped or diverged) and it failed on ",
                         Join(parts, "; "), ".", detail);
      g.findings.push_back(f);
    } else if (!inside.empty()) {
      FlightFinding f;
      f.kind = FlightFindingKind::kStuck;
      f.ranks = inside;
      f.sequence = front;
      f.operation = Describe(*example);
      f.message = StrCat(Ranks(inside), " are inside ", f.operation,
                         " and every rank called it: no rank stopped or diverged. If the dumps were taken during a "
                         "hang, the operation itself does not progress (network, backend or device): run gpudoctor "
                         "cluster, and look at the backend's own log.");
      g.findings.push_back(f);
    }
  }

  if (g.findings.empty()) {
    g.headline = front > 0 ? StrCat("the ", g.ranks.size(), " ranks agree: all reached collective #", front,
                                    ", no rank stopped or diverged")
                           : "no collective recorded";
  } else {
    const FlightFinding& f = g.findings.front();
    g.headline = f.message.substr(0, f.message.find(". ") == std::string::npos ? f.message.size() : f.message.find(". "));
  }
  return g;
}

}  // namespace

FlightVerdict AnalyzeFlightDumps(const std::vector<FlightDump>& dumps) {
  FlightVerdict v;
  std::map<std::string, std::vector<const FlightDump*>> groups;
  std::set<std::string> jobs;
  for (const FlightDump& d : dumps) {
    groups[d.group].push_back(&d);
    jobs.insert(d.job);
  }
  if (jobs.size() > 1) {
    std::vector<std::string> names(jobs.begin(), jobs.end());
    for (auto& n : names) n = n.empty() ? "(none)" : n;
    v.warnings.push_back(StrCat("the dumps come from different jobs (", Join(names, ", "), "): pass one job's dumps"));
  }
  for (const auto& [name, list] : groups) v.groups.push_back(AnalyzeGroup(name, list, v.warnings));
  // The world (or the group with most ranks) first.
  std::stable_sort(v.groups.begin(), v.groups.end(), [](const FlightGroupVerdict& a, const FlightGroupVerdict& b) {
    return a.world_size > b.world_size;
  });
  return v;
}

Result<FlightVerdict> ExplainFlightRecords(const std::vector<std::pair<std::string, std::string>>& documents) {
  std::vector<FlightDump> dumps;
  for (const auto& [source, text] : documents) {
    auto d = ParseFlightDump(text);
    if (!d.ok()) return d.status().WithContext(source);
    d->source = source;
    dumps.push_back(std::move(*d));
  }
  if (dumps.empty()) return Status::InvalidArgument("no flight recorder dump given");
  return AnalyzeFlightDumps(dumps);
}

int FlightVerdict::ExitCode() const {
  for (const auto& g : groups)
    if (!g.findings.empty()) return 1;
  return 0;
}

}  // namespace commkit::diagnostics
