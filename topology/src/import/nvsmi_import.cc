// nvidia-smi topo -m / topo -p2p text importers.
#include <algorithm>
#include <cctype>
#include <map>

#include "commkit/common/escape.h"
#include "commkit/common/strings.h"
#include "commkit/topology/import.h"
#include "commkit/topology/path.h"

namespace commkit::topology {
namespace {

constexpr std::size_t kMaxInputBytes = 16u << 20;
constexpr std::size_t kMaxDevices = 1024;

std::vector<std::string> Tokens(std::string_view line) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == ' ' || c == '\t' || c == '\r') {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

bool IsGpuName(std::string_view s) {
  return s.size() > 3 && s.compare(0, 3, "GPU") == 0 &&
         std::all_of(s.begin() + 3, s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

struct Table {
  std::vector<std::string> columns;          // device columns
  std::vector<std::string> extra;            // "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"
  struct Row {
    std::string name;
    std::vector<std::string> cells;
    std::vector<std::string> extra;
    int line;
  };
  std::vector<Row> rows;
  std::map<std::string, std::string> nic_legend;  // NIC0 -> mlx5_0
  std::string p2p_mode;
};

Result<Table> ParseTable(std::string_view text, std::string_view origin, bool allow_extra) {
  if (text.size() > kMaxInputBytes) return Status::InvalidArgument(StrCat(origin, ": larger than 16 MiB"));
  Table t;
  // nvidia-smi 580 underlines the header row (ESC[4m ... ESC[0m) even when its output is redirected.
  const std::vector<std::string> lines = Split(StripTerminalEscapes(text), '\n');
  bool in_matrix = false, done = false;
  for (std::size_t li = 0; li < lines.size(); ++li) {
    const int line_no = static_cast<int>(li) + 1;
    const std::string& line = lines[li];
    std::vector<std::string> tok = Tokens(line);
    if (!tok.empty() && tok[0] == "$") {
      auto p = std::find(tok.begin(), tok.end(), "-p2p");
      if (p != tok.end() && p + 1 != tok.end()) t.p2p_mode = *(p + 1);
      continue;
    }
    if (!in_matrix && !done) {
      if (std::find(tok.begin(), tok.end(), "GPU0") == tok.end()) continue;
      // Header: device names until "CPU"/"NUMA"/"GPU NUMA ID" phrases.
      std::size_t i = 0;
      for (; i < tok.size(); ++i) {
        if (tok[i] == "CPU" || tok[i] == "NUMA" ||
            (tok[i] == "GPU" && i + 1 < tok.size() && tok[i + 1] == "NUMA")) {
          break;
        }
        t.columns.push_back(tok[i]);
      }
      for (; i < tok.size(); ++i) {
        if (tok[i] == "Affinity" || tok[i] == "ID") {
          t.extra.back() += " " + tok[i];
        } else if (tok[i] == "NUMA" && !t.extra.empty() && t.extra.back() == "GPU") {
          t.extra.back() += " NUMA";
        } else {
          t.extra.push_back(tok[i]);
        }
      }
      if (!allow_extra && !t.extra.empty()) {
        return Status::DataLoss(StrCat(origin, ":", line_no, ": unexpected columns after the P2P matrix"));
      }
      if (t.columns.empty() || t.columns.size() > kMaxDevices) {
        return Status::DataLoss(StrCat(origin, ":", line_no, ": bad header (", t.columns.size(), " devices)"));
      }
      in_matrix = true;
      continue;
    }
    if (in_matrix) {
      if (tok.empty()) {
        in_matrix = false;
        done = true;
        continue;
      }
      Table::Row row;
      row.name = tok[0];
      row.line = line_no;
      if (tok.size() < 1 + t.columns.size()) {
        return Status::DataLoss(StrCat(origin, ":", line_no, ": row ", row.name, " has ", tok.size() - 1,
                                       " cells, expected ", t.columns.size(), "; is the output truncated?"));
      }
      row.cells.assign(tok.begin() + 1, tok.begin() + 1 + static_cast<std::ptrdiff_t>(t.columns.size()));
      row.extra.assign(tok.begin() + 1 + static_cast<std::ptrdiff_t>(t.columns.size()), tok.end());
      if (row.extra.size() > t.extra.size()) {
        return Status::DataLoss(StrCat(origin, ":", line_no, ": row ", row.name, " has ",
                                       row.extra.size() - t.extra.size(), " cells too many"));
      }
      t.rows.push_back(std::move(row));
      if (t.rows.size() == t.columns.size()) {
        in_matrix = false;
        done = true;
      }
      continue;
    }
    // Legend section: "  NIC0: mlx5_0".
    if (tok.size() == 2 && tok[0].size() > 4 && tok[0].compare(0, 3, "NIC") == 0 && tok[0].back() == ':') {
      t.nic_legend[tok[0].substr(0, tok[0].size() - 1)] = tok[1];
    }
  }
  if (t.columns.empty()) return Status::DataLoss(StrCat(origin, ": no matrix header with GPU0 found"));
  if (t.rows.size() != t.columns.size()) {
    return Status::DataLoss(StrCat(origin, ": matrix has ", t.rows.size(), " rows for ", t.columns.size(),
                                   " columns; is the output truncated?"));
  }
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    if (t.rows[i].name != t.columns[i]) {
      return Status::DataLoss(StrCat(origin, ":", t.rows[i].line, ": row ", t.rows[i].name,
                                     " does not match column ", t.columns[i]));
    }
    if (t.rows[i].cells[i] != "X") {
      return Status::DataLoss(StrCat(origin, ":", t.rows[i].line, ": diagonal cell of ", t.rows[i].name,
                                     " is '", t.rows[i].cells[i], "', expected X"));
    }
  }
  return t;
}

// Adds GPU/NIC nodes for the columns; returns their ids.
Result<std::vector<NodeId>> AddDevices(Topology& topo, const Table& t, std::string_view origin, bool gpus_only) {
  std::vector<NodeId> ids;
  for (const std::string& c : t.columns) {
    Node n;
    if (IsGpuName(c)) {
      n.kind = NodeKind::kGpu;
      auto idx = ParseInt(std::string_view(c).substr(3));
      if (!idx || *idx > 100000) return Status::DataLoss(StrCat(origin, ": bad GPU column ", c));
      n.gpu.index = static_cast<int>(*idx);
      n.label = c;
      if (topo.FindGpu(n.gpu.index)) return Status::DataLoss(StrCat(origin, ": column ", c, " repeated"));
    } else {
      if (gpus_only) return Status::DataLoss(StrCat(origin, ": unexpected column ", c, " in a P2P matrix"));
      n.kind = NodeKind::kNic;
      auto it = t.nic_legend.find(c);
      n.nic.name = it != t.nic_legend.end() ? it->second : c;
      n.label = n.nic.name;
      if (topo.FindNic(n.nic.name)) return Status::DataLoss(StrCat(origin, ": NIC ", n.nic.name, " repeated"));
    }
    ids.push_back(topo.AddNode(std::move(n)));
  }
  return ids;
}

}  // namespace

Result<Topology> ImportNvsmiMatrix(std::string_view text, std::string_view origin) {
  COMMKIT_ASSIGN_OR_RETURN(Table t, ParseTable(text, origin, true));
  Topology topo;
  topo.metadata().source = TopologySource::kNvsmi;
  topo.metadata().source_path = std::string(origin);
  if (!t.nic_legend.empty()) topo.metadata().notes.push_back("nvsmi: NIC Legend");
  COMMKIT_ASSIGN_OR_RETURN(std::vector<NodeId> ids, AddDevices(topo, t, origin, false));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    for (std::size_t j = 0; j < ids.size(); ++j) {
      if (i == j) continue;
      const std::string& cell = t.rows[i].cells[j];
      auto parsed = ParsePathLabel(cell);
      if (!parsed.ok() || parsed->first == PathType::kSelf) {
        return Status::DataLoss(StrCat(origin, ":", t.rows[i].line, ": cell ", t.columns[i], "/", t.columns[j],
                                       " is '", cell, "', expected NV#, PIX, PXB, PHB, NODE, SYS or SOC"));
      }
      if (j < i) {
        if (cell != t.rows[j].cells[i]) {
          topo.metadata().notes.push_back(StrCat(origin, ":", t.rows[i].line, ": asymmetric cell ", t.columns[i],
                                                 "/", t.columns[j], " (", cell, " vs ", t.rows[j].cells[i], ")"));
        }
        continue;
      }
      topo.AddPathOverride({ids[i], ids[j], cell == "SOC" ? std::string("SYS") : cell});
    }
    if (topo.node(ids[i]).kind == NodeKind::kGpu && !t.extra.empty()) {
      GpuAffinity a;
      a.gpu = ids[i];
      for (std::size_t k = 0; k < t.extra.size() && k < t.rows[i].extra.size(); ++k) {
        if (t.extra[k] == "CPU Affinity") a.cpu_affinity = t.rows[i].extra[k];
        if (t.extra[k] == "NUMA Affinity") a.numa_affinity = t.rows[i].extra[k];
        if (t.extra[k] == "GPU NUMA ID") a.gpu_numa_id = t.rows[i].extra[k];
      }
      topo.AddGpuAffinity(a);
    }
  }
  COMMKIT_RETURN_IF_ERROR(topo.Validate().WithContext(origin));
  return topo;
}

Result<Topology> ImportNvsmiP2p(std::string_view text, std::string_view origin) {
  COMMKIT_ASSIGN_OR_RETURN(Table t, ParseTable(text, origin, false));
  Topology topo;
  topo.metadata().source = TopologySource::kNvsmi;
  topo.metadata().source_path = std::string(origin);
  char mode = 'r';
  if (t.p2p_mode.size() == 1 && std::string_view("rwnap").find(t.p2p_mode[0]) != std::string_view::npos) {
    mode = t.p2p_mode[0];
  }
  COMMKIT_ASSIGN_OR_RETURN(std::vector<NodeId> ids, AddDevices(topo, t, origin, true));
  static const char* kStatuses[] = {"OK", "CNS", "GNS", "TNS", "NS", "DR", "U", "IOH", "CNP"};
  for (std::size_t i = 0; i < ids.size(); ++i) {
    for (std::size_t j = 0; j < ids.size(); ++j) {
      if (i == j) continue;
      const std::string& cell = t.rows[i].cells[j];
      if (std::none_of(std::begin(kStatuses), std::end(kStatuses), [&](const char* s) { return cell == s; })) {
        return Status::DataLoss(StrCat(origin, ":", t.rows[i].line, ": P2P cell ", t.columns[i], "/",
                                       t.columns[j], " is '", cell, "', expected OK, CNS, GNS, TNS, NS, DR or U"));
      }
      topo.AddP2pOverride({ids[i], ids[j], mode, cell});
    }
  }
  COMMKIT_RETURN_IF_ERROR(topo.Validate().WithContext(origin));
  return topo;
}

}  // namespace commkit::topology
