// DOT and SVG renderings of a Topology.
#include <algorithm>
#include <cstdio>
#include <map>

#include "commkit/common/strings.h"
#include "commkit/topology/export.h"

namespace commkit::topology {
namespace {

std::string Gbps(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB/s", v);
  return buf;
}

std::string NodeText(const Node& n) {
  std::string s = n.label.empty() ? StrCat(ToString(n.kind), " ", n.id) : n.label;
  if (n.kind == NodeKind::kGpu && !n.gpu.name.empty()) s += StrCat("\\n", n.gpu.name);
  if (n.kind == NodeKind::kNic && n.nic.kind != NicKind::kUnknown) s += StrCat("\\n", ToString(n.nic.kind));
  if (n.kind == NodeKind::kCpu && n.cpu.numa_id >= 0) s = StrCat("CPU / NUMA ", n.cpu.numa_id);
  return s;
}

std::string PcieEdgeLabel(const Node& child) {
  const PcieLink& l = child.pci.link;
  if (l.gen <= 0 && l.width <= 0) return "PCIe";
  std::string s = "PCIe";
  if (l.gen > 0) s += StrCat(" Gen", l.gen);
  if (l.width > 0) s += StrCat(" x", l.width);
  if (l.BandwidthGBps() > 0) s += StrCat(" ", Gbps(l.BandwidthGBps()));
  return s;
}

double LinkGbps(const Topology& t, const Link& l) {
  if (l.bandwidth_gbps > 0) return l.bandwidth_gbps;
  if (l.kind != LinkKind::kNvLink) return 0;
  int version = l.nvlink_version;
  for (NodeId id : {l.a, l.b}) version = std::max(version, NvLinkVersionForSm(t.node(id).gpu.sm));
  return NvLinkPerLinkGBps(version) * l.count;
}

std::string LinkLabel(const Topology& t, const Link& l) {
  std::string s = l.kind == LinkKind::kNvLink ? StrCat("NV", l.count) : std::string(ToString(l.kind));
  const double bw = LinkGbps(t, l);
  if (bw > 0) s += StrCat(" ", Gbps(bw));
  return s;
}

std::string XmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20) out += c;
    }
  }
  return out;
}

std::string DotEscape(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '"') out += "\\\"";
    else if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == 'n') { out += "\\n"; ++i; }
    else if (s[i] == '\\') out += "\\\\";
    else if (static_cast<unsigned char>(s[i]) >= 0x20) out += s[i];
  }
  return out;
}

const char* Fill(NodeKind k) {
  switch (k) {
    case NodeKind::kCpu: return "#cfe2f3";
    case NodeKind::kHostBridge: return "#eeeeee";
    case NodeKind::kPciSwitch: return "#fff2cc";
    case NodeKind::kGpu: return "#d9ead3";
    case NodeKind::kNvSwitch: return "#d0e0e3";
    case NodeKind::kNic: return "#f4cccc";
    case NodeKind::kOtherPci: return "#ffffff";
  }
  return "#ffffff";
}

}  // namespace

std::string ExportDot(const Topology& t) {
  std::string out = "graph topology {\n  rankdir=TB;\n  node [shape=box, style=filled, fontname=\"Helvetica\"];\n";
  for (const Node& n : t.nodes()) {
    out += StrCat("  n", n.id, " [label=\"", DotEscape(NodeText(n)), "\", fillcolor=\"", Fill(n.kind), "\"];\n");
  }
  for (const Node& n : t.nodes()) {
    if (n.parent != kNoNode && t.Contains(n.parent)) {
      out += StrCat("  n", n.parent, " -- n", n.id, " [label=\"", DotEscape(PcieEdgeLabel(n)), "\"];\n");
    }
  }
  for (const Link& l : t.links()) {
    const char* color = l.kind == LinkKind::kNvLink ? "#6aa84f" : l.kind == LinkKind::kSmp ? "#3d85c6" : "#999999";
    out += StrCat("  n", l.a, " -- n", l.b, " [label=\"", DotEscape(LinkLabel(t, l)), "\", color=\"", color,
                  "\", penwidth=2];\n");
  }
  out += "}\n";
  return out;
}

std::string ExportSvg(const Topology& t) {
  constexpr int kBoxW = 150, kBoxH = 44, kGapX = 24, kRowH = 120, kMargin = 30;
  const std::size_t count = t.nodes().size();
  // Rows: tree depth for CPUs/bridges/switches; all leaf devices share the bottom device row;
  // NVSwitches (usually roots or leaves) get their own row under it.
  std::vector<int> row(count, 0);
  int max_inner = 0;
  for (const Node& n : t.nodes()) {
    const int depth = static_cast<int>(t.Ancestors(n.id).size()) - 1;
    if (n.kind == NodeKind::kCpu || n.kind == NodeKind::kHostBridge || n.kind == NodeKind::kPciSwitch) {
      row[static_cast<std::size_t>(n.id)] = depth;
      max_inner = std::max(max_inner, depth);
    }
  }
  const int device_row = max_inner + 1, nvswitch_row = max_inner + 2;
  for (const Node& n : t.nodes()) {
    if (n.kind == NodeKind::kGpu || n.kind == NodeKind::kNic || n.kind == NodeKind::kOtherPci) {
      row[static_cast<std::size_t>(n.id)] = device_row;
    } else if (n.kind == NodeKind::kNvSwitch) {
      row[static_cast<std::size_t>(n.id)] = nvswitch_row;
    }
  }
  // Order within rows by depth-first order from the roots so children sit under their parents.
  std::vector<NodeId> order;
  std::vector<char> seen(count, 0);
  std::vector<std::vector<NodeId>> kids(count);
  std::vector<NodeId> roots;
  for (const Node& n : t.nodes()) {
    if (n.parent != kNoNode && t.Contains(n.parent)) kids[static_cast<std::size_t>(n.parent)].push_back(n.id);
    else roots.push_back(n.id);
  }
  std::vector<NodeId> stack(roots.rbegin(), roots.rend());
  while (!stack.empty()) {
    const NodeId id = stack.back();
    stack.pop_back();
    if (seen[static_cast<std::size_t>(id)]) continue;
    seen[static_cast<std::size_t>(id)] = 1;
    order.push_back(id);
    const auto& k = kids[static_cast<std::size_t>(id)];
    for (auto it = k.rbegin(); it != k.rend(); ++it) stack.push_back(*it);
  }
  for (const Node& n : t.nodes()) {
    if (!seen[static_cast<std::size_t>(n.id)]) order.push_back(n.id);  // cycles (invalid input)
  }
  std::map<int, int> row_fill;
  std::vector<int> x(count, 0), y(count, 0);
  for (NodeId id : order) {
    const int r = row[static_cast<std::size_t>(id)];
    const int slot = row_fill[r]++;
    x[static_cast<std::size_t>(id)] = kMargin + slot * (kBoxW + kGapX);
    y[static_cast<std::size_t>(id)] = kMargin + r * kRowH;
  }
  int width = 2 * kMargin + kBoxW, height = 2 * kMargin + kBoxH;
  for (std::size_t i = 0; i < count; ++i) {
    width = std::max(width, x[i] + kBoxW + kMargin);
    height = std::max(height, y[i] + kBoxH + kMargin);
  }
  std::string out = StrCat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", width, "\" height=\"", height, "\" viewBox=\"0 0 ", width,
      " ", height, "\" font-family=\"Helvetica,Arial,sans-serif\" font-size=\"11\">\n",
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  auto cx = [&](NodeId id) { return x[static_cast<std::size_t>(id)] + kBoxW / 2; };
  auto edge = [&](NodeId a, NodeId b, const std::string& label, const char* color, bool top_bottom) {
    const int x1 = cx(a), x2 = cx(b);
    const int y1 = y[static_cast<std::size_t>(a)] + (top_bottom ? kBoxH : kBoxH / 2);
    const int y2 = y[static_cast<std::size_t>(b)] + (top_bottom ? 0 : kBoxH / 2);
    out += StrCat("<line x1=\"", x1, "\" y1=\"", y1, "\" x2=\"", x2, "\" y2=\"", y2, "\" stroke=\"", color,
                  "\" stroke-width=\"2\"/>\n");
    out += StrCat("<text x=\"", (x1 + x2) / 2 + 4, "\" y=\"", (y1 + y2) / 2, "\" fill=\"#444\">", XmlEscape(label),
                  "</text>\n");
  };
  for (const Node& n : t.nodes()) {
    if (n.parent != kNoNode && t.Contains(n.parent)) edge(n.parent, n.id, PcieEdgeLabel(n), "#999999", true);
  }
  for (const Link& l : t.links()) {
    const char* color = l.kind == LinkKind::kNvLink ? "#6aa84f" : l.kind == LinkKind::kSmp ? "#3d85c6" : "#b45f06";
    edge(l.a, l.b, LinkLabel(t, l), color, false);
  }
  for (const Node& n : t.nodes()) {
    const int nx = x[static_cast<std::size_t>(n.id)], ny = y[static_cast<std::size_t>(n.id)];
    out += StrCat("<g><rect x=\"", nx, "\" y=\"", ny, "\" width=\"", kBoxW, "\" height=\"", kBoxH,
                  "\" rx=\"6\" fill=\"", Fill(n.kind), "\" stroke=\"#333\"/>\n");
    const std::vector<std::string> lines = Split(NodeText(n), '\\');
    int line_y = ny + 18;
    for (std::string l : lines) {
      if (!l.empty() && l[0] == 'n' && line_y > ny + 18) l.erase(0, 1);  // "\n" separators
      out += StrCat("<text x=\"", nx + kBoxW / 2, "\" y=\"", line_y, "\" text-anchor=\"middle\">", XmlEscape(l),
                    "</text>\n");
      line_y += 14;
    }
    out += "</g>\n";
  }
  out += "</svg>\n";
  return out;
}

}  // namespace commkit::topology
