#include "facts.h"

#include <algorithm>
#include <cctype>

#include "error_codes.h"

namespace commkit::diagnostics::explain {

namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::string_view Token(std::string_view s, std::size_t pos, const char* stops = " \t,;\"'()") {
  std::size_t end = pos;
  while (end < s.size() && std::string_view(stops).find(s[end]) == std::string_view::npos) ++end;
  return s.substr(pos, end - pos);
}

long long ParseNum(std::string_view s, std::size_t pos, std::size_t* end = nullptr) {
  long long v = 0;
  std::size_t i = pos;
  bool any = false;
  while (i < s.size() && IsDigit(s[i]) && i - pos < 18) {
    v = v * 10 + (s[i] - '0');
    ++i;
    any = true;
  }
  if (end != nullptr) *end = i;
  return any ? v : -1;
}

// The number after `key` in s, or -1.
long long NumberAfter(std::string_view s, std::string_view key) {
  std::size_t at = s.find(key);
  if (at == std::string_view::npos) return -1;
  return ParseNum(s, at + key.size());
}

// "[Rank 3]", "Rank 3]" (c10d prefixes), "rank 3" in the body.
int RankInBody(std::string_view body) {
  for (std::string_view key : {"[Rank ", " Rank ", "[rank"}) {
    std::size_t at = body.find(key);
    if (at != std::string_view::npos) {
      long long v = ParseNum(body, at + key.size());
      if (v >= 0 && v < 1000000) return static_cast<int>(v);
    }
  }
  return -1;
}



// "eth0:10.0.0.1<0>", "[0]eth0:10.0.0.1<0>" -> "eth0"
std::string InterfaceName(std::string_view tok) {
  if (!tok.empty() && tok.front() == '[') {
    std::size_t close = tok.find(']');
    if (close != std::string_view::npos) tok.remove_prefix(close + 1);
  }
  std::size_t colon = tok.find(':');
  return std::string(tok.substr(0, colon));
}

void Interfaces(std::string_view body, LogFacts& f) {
  // "NET/Socket : Using [0]eth0:10.0.0.1<0> [1]ib0:...", "Bootstrap : Using eth0:...", "Bootstrap: Using ..."
  for (std::string_view key : {"NET/Socket : Using ", "Bootstrap : Using ", "Bootstrap: Using ", "NET/Socket: Using "}) {
    std::size_t at = body.find(key);
    if (at == std::string_view::npos) continue;
    std::size_t pos = at + key.size();
    while (pos < body.size()) {
      std::string_view tok = Token(body, pos, " \t;");
      if (tok.empty()) break;
      std::string name = InterfaceName(tok);
      if (!name.empty() && tok.find(':') != std::string_view::npos) AddUnique(f.interfaces, name);
      pos += tok.size();
      while (pos < body.size() && body[pos] == ' ') ++pos;
    }
  }
  // "NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/IB [RO]; OOB eth0:..."
  for (std::string_view key : {"NET/IB : Using ", "NET/IB: Using "}) {
    std::size_t at = body.find(key);
    if (at == std::string_view::npos) continue;
    std::size_t pos = at + key.size();
    while (pos < body.size() && body[pos] != ';') {
      std::string_view tok = Token(body, pos, " \t;");
      if (tok.empty()) {
        ++pos;
        continue;
      }
      if (tok.front() == '[' && tok.size() > 3 && tok[1] != 'R') {
        std::size_t close = tok.find(']');
        std::string_view dev = tok.substr(close + 1);
        if (!dev.empty()) {
          AddUnique(f.ib_devices, std::string(dev));
          std::size_t slash = dev.find('/');
          if (slash != std::string_view::npos) AddUnique(f.link_layers, std::string(dev.substr(slash + 1)));
        }
      }
      pos += tok.size();
    }
    std::size_t oob = body.find("OOB ", at);
    if (oob != std::string_view::npos) AddUnique(f.interfaces, InterfaceName(Token(body, oob + 4)));
  }
}

void Transports(std::string_view body, LogFacts& f) {
  std::size_t via = body.find(" via ");
  if (via != std::string_view::npos) {
    std::string_view t = Token(body, via + 5, " \t,;");
    if (t.rfind("NET/", 0) == 0) {
      t.remove_prefix(4);
      std::size_t slash = t.find('/');
      t = t.substr(0, slash);
      if (t == "AWS") t = "OFI";
    } else {
      t = t.substr(0, t.find('/'));
    }
    if (!t.empty()) AddUnique(f.transports, std::string(t));
  }
  for (std::string_view key : {"Using network ", "Using internal Network "}) {
    std::size_t at = body.find(key);
    if (at == std::string_view::npos) continue;
    std::string t(Token(body, at + key.size()));
    if (t == "AWS" || t.rfind("Libfabric", 0) == 0) t = "OFI";
    if (t == "IBext") t = "IB";
    if (!t.empty()) AddUnique(f.transports, t);
  }
  if (body.find("NET/OFI Selected Provider is ") != std::string_view::npos) AddUnique(f.transports, std::string("OFI"));
}

void Environment(std::string_view body, LogFacts& f) {
  // NCCL: "NCCL_SOCKET_IFNAME set by environment to eth0", older "NCCL_SOCKET_IFNAME set to eth2".
  for (std::string_view key : {" set by environment to ", " set to "}) {
    std::size_t at = body.find(key);
    if (at == std::string_view::npos) continue;
    std::size_t start = at;
    while (start > 0 && body[start - 1] != ' ') --start;
    std::string_view var = body.substr(start, at - start);
    if (var.rfind("NCCL_", 0) != 0 && var.rfind("GLOO_", 0) != 0 && var.rfind("TORCH_", 0) != 0 &&
        var.rfind("CUDA_", 0) != 0 && var.rfind("FI_", 0) != 0)
      continue;
    std::string value(Token(body, at + key.size(), " \t,;"));
    while (!value.empty() && value.back() == '.') value.pop_back();
    f.env.emplace(std::string(var), value);
    break;
  }
  // Shell lines in the log: "export NCCL_SOCKET_IFNAME=eth0", "NCCL_DEBUG=INFO torchrun ...".
  for (std::size_t at = body.find("_"); at != std::string_view::npos && at < body.size();
       at = body.find("_", at + 1)) {
    std::size_t start = at;
    while (start > 0 && (std::isupper(static_cast<unsigned char>(body[start - 1])) || body[start - 1] == '_')) --start;
    if (start > 0 && body[start - 1] != ' ' && body[start - 1] != '"' && body[start - 1] != '\'') continue;
    std::string_view rest = body.substr(start);
    if (rest.rfind("NCCL_", 0) != 0 && rest.rfind("GLOO_SOCKET_IFNAME", 0) != 0 && rest.rfind("MASTER_", 0) != 0)
      continue;
    std::size_t eq = rest.find('=');
    std::string_view var = rest.substr(0, eq);
    if (eq == std::string_view::npos || var.find(' ') != std::string_view::npos || var.empty()) continue;
    std::string value(Token(rest, eq + 1, " \t,;\"'"));
    if (!value.empty()) f.env.emplace(std::string(var), value);
    at = start + eq;
  }
}

void Gids(std::string_view body, LogFacts& f) {
  for (std::string_view key : {"localGid ", "remoteGids", "remoteGid ", "GID "}) {
    std::size_t at = body.find(key);
    if (at == std::string_view::npos) continue;
    std::size_t pos = at + key.size();
    while (pos < body.size() && body[pos] == ' ') ++pos;
    std::string_view g = Token(body, pos, " \t,;)");
    if (g.find(':') != std::string_view::npos && g.size() >= 4) AddUnique(f.gids, std::string(g));
  }
  // ibv_devinfo -v / show_gids tables: "GID[  3]:  ::ffff:10.0.0.1, RoCE v2"
  if (std::size_t at = body.find("GID["); at != std::string_view::npos) {
    std::size_t colon = body.find("]:", at);
    if (colon != std::string_view::npos) {
      std::size_t pos = colon + 2;
      while (pos < body.size() && (body[pos] == ' ' || body[pos] == '\t')) ++pos;
      std::string_view g = Token(body, pos, " \t,;");
      if (g.find(':') != std::string_view::npos) AddUnique(f.gids, std::string(g));
    }
  }
}

void Progress(const Message& m, const std::vector<std::string>& names, LogFacts& f) {
  std::string_view body = m.line->body;
  long long seq = NumberAfter(body, "SeqNum=");
  long long enq = NumberAfter(body, "last enqueued NCCL work: ");
  long long done = NumberAfter(body, "last completed NCCL work: ");
  if (seq < 0 && enq < 0) return;
  RankProgress p;
  p.rank = RankInBody(body);
  if (p.rank < 0) p.rank = m.line->rank;
  p.source = names.empty() ? std::string() : names[static_cast<std::size_t>(m.line->source)];
  p.seq = seq >= 0 ? seq : NumberAfter(body, "Timeout at NCCL work: ");
  std::size_t op = body.find("OpType=");
  if (op != std::string_view::npos) p.op = std::string(Token(body, op + 7, " \t,;)"));
  p.last_enqueued = enq;
  p.last_completed = done;
  p.line = m.line->number;
  p.text = m.line->raw;
  // One entry per (source, rank): a rank's later report of the same work adds its enqueued/completed.
  for (RankProgress& q : f.progress) {
    if (q.rank == p.rank && q.source == p.source) {
      if (q.seq < 0) q.seq = p.seq;
      if (q.op.empty()) q.op = p.op;
      if (q.last_enqueued < 0) q.last_enqueued = p.last_enqueued;
      if (q.last_completed < 0) q.last_completed = p.last_completed;
      return;
    }
  }
  if (f.progress.size() < kMaxFactValues) f.progress.push_back(std::move(p));
}

}  // namespace

EvidenceLine Evidence(const Message& m, const std::vector<std::string>& names) {
  EvidenceLine e;
  e.line = m.line->number;
  e.text = m.line->raw;
  if (names.size() > 1) e.source = names[static_cast<std::size_t>(m.line->source)];
  return e;
}

bool IsEnvelopeOrHeader(const Message& m) {
  static const char* kEnvelopes[] = {
      "ncclinternalerror", "internal check failed", "unhandled system error", "unhandled cuda error",
      "internal error - please report", "invalid usage (run with", "remote process exited or there was a network error",
      "nccl error in:", "distbackenderror", "ncclsystemerror", "ncclunhandledcudaerror", "ncclinvalidusage",
      "ncclremoteerror", "test nccl failure", "childfailederror", "this usually reflects", "see root cause above",
      "engine core initialization failed", "nccl error:", "unknown file: failure", "c++ exception with description",
      "to avoid data inconsistency", "some nccl operations have failed or timed out", "terminate called after",
      "what():", "nccl communicator was aborted", "exception raised from", "frame #", "test failure",
      "system call (e.g. socket, malloc)", "error raised by"};
  const std::string& l = m.lower;
  for (const char* e : kEnvelopes)
    if (Contains(l, e)) return true;
  std::string_view body = m.line->body;
  // Headers: "Last error:", "Traceback (most recent call last):", "The above exception was ...:",
  // "Root Cause (first observed failure):", "Failures:" — a short line ending in ':'.
  if (!body.empty() && body.back() == ':' && body.size() < 90) return true;
  if (Contains(l, "traceback (most recent call last)") || body.rfind("File \"", 0) == 0) return true;
  if (body.find_first_not_of("=-*#~ ") == std::string_view::npos) return true;
  return false;
}

bool ListsPossibleCauses(std::string_view lower) {
  static const std::vector<std::string_view> kHedges = {
      "potential root cause", "possible cause", "possible reason", "possible root cause", "one of the following",
      "could be caused by", "may be caused by", "might be caused by", "can be caused by", "some potential causes"};
  for (std::string_view h : kHedges)
    if (Contains(lower, h)) return true;
  return false;
}

bool LooksLikeError(const Message& m) {
  // NCCL WARNs every verbs async event; only the error events (ibv_event_type_str: "... error",
  // "... catastrophic error", "device fatal error") mean something broke. "GID table change", "port
  // active", "LID change" are the fabric's bookkeeping.
  if (Contains(m.lower, "got async event") && !Contains(m.lower, "error") && !Contains(m.lower, "fatal") &&
      !Contains(m.lower, "catastroph"))
    return false;
  if (m.line->nccl_warn) return true;
  // A catalog message its library prints as a warning / error is one, whatever its wording
  // ("ncclSocketInit: connecting to address with family 59936 is neither AF_INET(2) nor AF_INET6(10)").
  if (m.match.entry != nullptr && (m.match.entry->level == "WARN" || m.match.entry->level == "ERROR")) return true;
  if (m.line->glog_level == 'E' || m.line->glog_level == 'F') return true;
  const std::string& l = m.lower;
  // NCCL's error-path trace "file.cc:123 -> 2" repeats the error, it is not one.
  if (Contains(l, " -> ") && m.line->nccl_info) return false;
  // NCCL probes its network plugins and transports at INFO ("Failed to initialize NET plugin IB" on every
  // machine without InfiniBand); a plugin it needed and could not load is a WARN.
  if (m.match.entry != nullptr && m.match.entry->level == "INFO" && m.match.entry->topic == "plugin") return false;
  // INFO-level catalog messages are progress reports unless they carry a failure or a socket errno
  // ("Call to connect returned Connection timed out, retrying").
  if (m.match.entry != nullptr && m.match.entry->level == "INFO" && !Contains(l, "fail") && !Contains(l, "error") &&
      !Contains(l, "timed out") && !Contains(l, "refused") && !Contains(l, "no route") && !Contains(l, "unreachable"))
    return false;
  static const char* kWords[] = {"error", "failed", "failure", "exception", "timed out", "timeout", "cannot ",
                                 "unable to", "fatal", "killed", "insufficient", "duplicate gpu", "not found",
                                 "no such", "refused", "aborted", "segmentation fault", "no space left",
                                 "api mismatch"};
  for (const char* w : kWords)
    if (Contains(l, w)) return true;
  return false;
}

bool UsesRoce(const LogFacts& facts) {
  return std::find(facts.link_layers.begin(), facts.link_layers.end(), "RoCE") != facts.link_layers.end();
}

void ExtractFacts(const std::vector<Message>& messages, const std::vector<std::string>& names, LogFacts& f) {
  for (const Message& m : messages) {
    const LogLine& line = *m.line;
    std::string_view body = line.body;
    ++f.lines;
    if (m.match.entry != nullptr) ++f.recognised;
    if (!line.host.empty()) AddUnique(f.hosts, line.host);
    if (line.cuda_device >= 0) AddUnique(f.cuda_devices, line.cuda_device);
    int rank = line.rank >= 0 ? line.rank : RankInBody(body);
    if (rank >= 0) AddUnique(f.ranks, rank);
    if (std::size_t at = body.find("NCCL version "); at != std::string_view::npos) {
      std::string v(Token(body, at + 13, " \t,;+\"'"));
      if (!v.empty() && IsDigit(v.front())) AddUnique(f.nccl_versions, v);
    }
    for (std::string_view key : {"cudaDriverVersion ", "CUDA Driver version ", "CUDA Version: ", "Driver Version: ",
                                 "CUDA runtime version ", "Cuda version "}) {
      std::size_t at = body.find(key);
      if (at == std::string_view::npos) continue;
      std::string v(Token(body, at + key.size()));
      if (!v.empty() && IsDigit(v.front())) AddUnique(f.cuda_versions, std::string(key.substr(0, key.size() - 1)) + " " + v);
    }
    if (body.find(" : Using") != std::string_view::npos || body.find(": Using ") != std::string_view::npos)
      Interfaces(body, f);
    Transports(body, f);
    Environment(body, f);
    Gids(body, f);
    for (std::string& e : ErrnosIn(m.lower)) AddUnique(f.errnos, e);
    Progress(m, names, f);
    if (f.first_error.line == 0 && LooksLikeError(m) && !IsEnvelopeOrHeader(m)) f.first_error = Evidence(m, names);
  }
}

}  // namespace commkit::diagnostics::explain
