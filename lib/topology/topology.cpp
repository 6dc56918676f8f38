#include "topology/topology.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/text.hpp"

namespace st {
namespace {

// More NVLinks than any GPU has to all its peers together (an H100 has 18, REFERENCE.md): a
// pair that shows k links while the GPU has n-1 peers cannot be wired directly if k (n-1) > 18.
constexpr int kMaxNvlinksPerGpu = 18;

std::vector<std::string> split_ws(const std::string& line) {
  std::vector<std::string> tokens;
  std::istringstream in(line);
  for (std::string t; in >> t;) tokens.push_back(t);
  return tokens;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

bool is_gpu_name(const std::string& t) {
  return t.size() > 3 && t.compare(0, 3, "GPU") == 0 &&
         std::all_of(t.begin() + 3, t.end(), [](unsigned char c) { return std::isdigit(c); });
}

// The order of the legend: the lower, the better the path.
int tier(const Link& l) { return static_cast<int>(l.kind); }

// true when a is a worse path than b.
bool worse(const Link& a, const Link& b) {
  if (tier(a) != tier(b)) return tier(a) > tier(b);
  return a.kind == LinkKind::nvlink && a.nvlinks < b.nvlinks;
}

bool same(const Link& a, const Link& b) { return a.kind == b.kind && a.nvlinks == b.nvlinks; }

std::optional<Link> parse_link(const std::string& t) {
  static const std::map<std::string, LinkKind> named = {{"X", LinkKind::self},   {"PIX", LinkKind::pix},
                                                        {"PXB", LinkKind::pxb},  {"PHB", LinkKind::phb},
                                                        {"NODE", LinkKind::node}, {"SYS", LinkKind::sys}};
  if (auto it = named.find(t); it != named.end()) return Link{it->second, 0};
  if (t.size() > 2 && t.compare(0, 2, "NV") == 0 &&
      std::all_of(t.begin() + 2, t.end(), [](unsigned char c) { return std::isdigit(c); })) {
    const int n = std::stoi(t.substr(2));
    if (n > 0 && n < 1000) return Link{LinkKind::nvlink, n};
  }
  return std::nullopt;
}

[[noreturn]] void fail_at(const std::string& name, int line, const std::string& what) {
  throw Error(name + ":" + std::to_string(line) + ": " + what, ErrorScope::all_ranks);
}

}  // namespace

std::string link_name(const Link& link) {
  switch (link.kind) {
    case LinkKind::self: return "X";
    case LinkKind::nvlink: return "NV" + std::to_string(link.nvlinks);
    case LinkKind::pix: return "PIX";
    case LinkKind::pxb: return "PXB";
    case LinkKind::phb: return "PHB";
    case LinkKind::node: return "NODE";
    case LinkKind::sys: return "SYS";
  }
  return "?";
}

std::string node_class_name(NodeClass c) {
  switch (c) {
    case NodeClass::cpu_only: return "CPU only";
    case NodeClass::single_gpu: return "single GPU";
    case NodeClass::nvswitch: return "all-to-all NVLink through NVSwitch";
    case NodeClass::nvlink_full_mesh: return "all-to-all NVLink, wired directly";
    case NodeClass::nvlink_partial: return "NVLink on some pairs (bridged pairs or partial mesh), PCIe elsewhere";
    case NodeClass::pcie_switch: return "PCIe only, under PCIe switches";
    case NodeClass::pcie_host_bridge: return "PCIe only, through the host bridges of one socket";
    case NodeClass::pcie_cross_socket: return "PCIe only, some pairs across CPU sockets";
  }
  return "?";
}

Topology parse_nvidia_smi_topo(const std::string& text, const std::string& name) {
  std::vector<std::string> lines;
  {
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
  }
  // The header is the first line naming a GPU column; anything above it (a prompt) is skipped.
  std::size_t header = lines.size();
  for (std::size_t i = 0; i < lines.size() && header == lines.size(); ++i)
    for (const auto& t : split_ws(lines[i]))
      if (is_gpu_name(t)) {
        header = i;
        break;
      }
  if (header == lines.size())
    throw Error(name + ": no header row with GPU columns (GPU0 ...): expected the output of `nvidia-smi topo -m`",
                ErrorScope::all_ranks);
  const int header_line = static_cast<int>(header) + 1;

  // Device columns come first; the affinity columns ("CPU Affinity", "NUMA Affinity",
  // "GPU NUMA ID") follow and are the only headings with spaces.
  std::vector<std::string> devices;
  for (const auto& t : split_ws(lines[header])) {
    if (t == "CPU" || t == "NUMA" || t == "GPU") break;
    if (std::find(devices.begin(), devices.end(), t) != devices.end())
      fail_at(name, header_line, "column '" + t + "' appears twice in the header");
    devices.push_back(t);
  }
  const bool cpu_column = lines[header].find("CPU Affinity") != std::string::npos;
  const bool numa_column = lines[header].find("NUMA Affinity") != std::string::npos;
  const std::size_t n = devices.size();

  Topology topo;
  topo.source = name;
  std::vector<int> gpu_index(n, -1), nic_index(n, -1);
  for (std::size_t c = 0; c < n; ++c) {
    if (is_gpu_name(devices[c])) {
      gpu_index[c] = static_cast<int>(topo.gpus.size());
      topo.gpus.push_back(devices[c]);
    } else {
      nic_index[c] = static_cast<int>(topo.nics.size());
      topo.nics.push_back(devices[c]);
    }
  }
  const std::size_t g = topo.gpus.size();
  topo.gpu_gpu.assign(g, std::vector<Link>(g));
  topo.gpu_nic.assign(g, std::vector<Link>(topo.nics.size()));
  topo.cpu_affinity.assign(g, "");
  topo.numa_affinity.assign(g, "");

  // One row per device, in the order of the columns.
  std::vector<std::vector<Link>> matrix(n);
  std::vector<int> row_line(n, 0);
  std::size_t next = header + 1;
  for (std::size_t r = 0; r < n; ++r, ++next) {
    const int line_no = static_cast<int>(next) + 1;
    if (next >= lines.size() || trim(lines[next]).empty() || trim(lines[next]).rfind("Legend", 0) == 0)
      fail_at(name, std::min(line_no, static_cast<int>(lines.size()) + 1),
              "the matrix ends after " + std::to_string(r) + " of its " + std::to_string(n) + " rows (row " +
                  devices[r] + " is missing): the file is truncated");
    const auto tokens = split_ws(lines[next]);
    if (tokens[0] != devices[r])
      fail_at(name, line_no, "expected the row of " + devices[r] + ", found '" + tokens[0] + "'");
    if (tokens.size() < n + 1)
      fail_at(name, line_no, "row " + devices[r] + " has " + std::to_string(tokens.size() - 1) +
                                 " entries, the header names " + std::to_string(n) + " devices: the row is truncated");
    row_line[r] = line_no;
    for (std::size_t c = 0; c < n; ++c) {
      const auto link = parse_link(tokens[c + 1]);
      if (!link)
        fail_at(name, line_no, "row " + devices[r] + ", column " + devices[c] + ": '" + tokens[c + 1] +
                                   "' is not a link (X, NV#, PIX, PXB, PHB, NODE or SYS)");
      if ((link->kind == LinkKind::self) != (r == c))
        fail_at(name, line_no, "row " + devices[r] + ", column " + devices[c] + ": '" + tokens[c + 1] + "' " +
                                   (r == c ? "on the diagonal, where X (self) belongs" : "is X (self) off the diagonal"));
      matrix[r].push_back(*link);
    }
    if (gpu_index[r] >= 0) {
      std::size_t extra = n + 1;
      if (cpu_column && extra < tokens.size()) topo.cpu_affinity[gpu_index[r]] = tokens[extra++];
      if (numa_column && extra < tokens.size()) topo.numa_affinity[gpu_index[r]] = tokens[extra++];
    }
  }
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t c = 0; c < r; ++c)
      if (!same(matrix[r][c], matrix[c][r]))
        fail_at(name, row_line[r], devices[r] + " -> " + devices[c] + " is " + link_name(matrix[r][c]) + " but " +
                                       devices[c] + " -> " + devices[r] + " (line " + std::to_string(row_line[c]) +
                                       ") is " + link_name(matrix[c][r]) + ": the matrix is not symmetric");
  for (std::size_t r = 0; r < n; ++r) {
    if (gpu_index[r] < 0) continue;
    for (std::size_t c = 0; c < n; ++c) {
      if (gpu_index[c] >= 0) topo.gpu_gpu[gpu_index[r]][gpu_index[c]] = matrix[r][c];
      else topo.gpu_nic[gpu_index[r]][nic_index[c]] = matrix[r][c];
    }
  }
  // "NIC Legend:" names the NICs ("NIC0: mlx5_0").
  for (std::size_t i = next; i < lines.size(); ++i) {
    const std::string l = trim(lines[i]);
    const auto colon = l.find(':');
    if (colon == std::string::npos) continue;
    auto it = std::find(topo.nics.begin(), topo.nics.end(), trim(l.substr(0, colon)));
    const std::string device = trim(l.substr(colon + 1));
    if (it != topo.nics.end() && !device.empty() && device.find(' ') == std::string::npos) *it = *it + " (" + device + ")";
  }
  return topo;
}

Topology read_topology_file(const std::string& path) {
  if (const FileCheck check = check_input_file(path))
    throw Error(input_file_message("topology file", path, check) +
                    " (--topology takes a saved `nvidia-smi topo -m` output: nvidia-smi topo -m > FILE)",
                ErrorScope::all_ranks);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open topology file '" + path + "': " + std::strerror(errno), ErrorScope::all_ranks);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error(path + ": cannot read the topology file", ErrorScope::all_ranks);
  return parse_nvidia_smi_topo(text.str(), path);
}

namespace {

// Greedy cliques of GPUs whose every pair has a path of at most tier t, in index order.
std::vector<std::vector<int>> cliques_at(const Topology& t, int max_tier) {
  const int n = t.gpu_count();
  std::vector<std::vector<int>> groups;
  std::vector<bool> taken(n, false);
  for (int i = 0; i < n; ++i) {
    if (taken[i]) continue;
    std::vector<int> group{i};
    taken[i] = true;
    for (int j = i + 1; j < n; ++j) {
      if (taken[j]) continue;
      const bool joins = std::all_of(group.begin(), group.end(), [&](int k) { return tier(t.gpu_gpu[k][j]) <= max_tier; });
      if (joins) group.push_back(j), taken[j] = true;
    }
    groups.push_back(group);
  }
  return groups;
}

}  // namespace

TopologySummary summarize(const Topology& t) {
  TopologySummary s;
  const int n = t.gpu_count();
  if (n == 0) return s;  // CPU only: no GPU groups
  if (n == 1) {
    s.node_class = NodeClass::single_gpu;
    s.fast_groups = {{0}};
    s.within = s.across = Link{LinkKind::self, 0};
  } else {
    bool all_nv = true, any_nv = false, uniform = true;
    Link worst{LinkKind::self, 0};
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        if (i == j) continue;
        const Link& l = t.gpu_gpu[i][j];
        all_nv = all_nv && l.kind == LinkKind::nvlink;
        any_nv = any_nv || l.kind == LinkKind::nvlink;
        uniform = uniform && same(l, t.gpu_gpu[0][1]);
        if (worse(l, worst)) worst = l;
      }
    if (all_nv)
      s.node_class = uniform && t.gpu_gpu[0][1].nvlinks * (n - 1) > kMaxNvlinksPerGpu ? NodeClass::nvswitch
                                                                                      : NodeClass::nvlink_full_mesh;
    else if (any_nv) s.node_class = NodeClass::nvlink_partial;
    else if (tier(worst) <= tier(Link{LinkKind::pxb})) s.node_class = NodeClass::pcie_switch;
    else if (tier(worst) <= tier(Link{LinkKind::node})) s.node_class = NodeClass::pcie_host_bridge;
    else s.node_class = NodeClass::pcie_cross_socket;

    // The best tier at which the GPUs fall into equal cliques of two or more.
    for (int max_tier = tier(Link{LinkKind::nvlink}); max_tier <= tier(Link{LinkKind::sys}); ++max_tier) {
      auto groups = cliques_at(t, max_tier);
      const auto size = groups.front().size();
      const bool equal = std::all_of(groups.begin(), groups.end(), [&](const auto& g) { return g.size() == size; });
      if (equal && size >= 2) {
        s.fast_groups = std::move(groups);
        break;
      }
    }
    if (s.fast_groups.empty()) {  // unequal at every tier: one group of all (no split helps hsdp)
      s.fast_groups.emplace_back();
      for (int i = 0; i < n; ++i) s.fast_groups.back().push_back(i);
    }
    std::vector<int> group_of(n);
    for (std::size_t g = 0; g < s.fast_groups.size(); ++g)
      for (int i : s.fast_groups[g]) group_of[i] = static_cast<int>(g);
    s.within = Link{LinkKind::self, 0};
    s.across = Link{LinkKind::self, 0};
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        if (i == j) continue;
        Link& target = group_of[i] == group_of[j] ? s.within : s.across;
        if (target.kind == LinkKind::self || worse(t.gpu_gpu[i][j], target)) target = t.gpu_gpu[i][j];
      }
    if (s.fast_groups.size() == 1) s.across = s.within;
  }
  for (int i = 0; i < n; ++i) {
    NicPlacement p;
    p.gpu = i;
    for (std::size_t k = 0; k < t.nics.size(); ++k)
      if (p.nic < 0 || worse(t.gpu_nic[i][p.nic], t.gpu_nic[i][k])) p.nic = static_cast<int>(k);
    if (p.nic >= 0) p.link = t.gpu_nic[i][p.nic];
    s.nics.push_back(p);
  }
  return s;
}

double link_gbps(const Link& link, double pcie_gbps) {
  switch (link.kind) {
    case LinkKind::self: return 0;
    case LinkKind::nvlink: return 25.0 * link.nvlinks;
    case LinkKind::pix:
    case LinkKind::pxb: return pcie_gbps;
    case LinkKind::phb:
    case LinkKind::node:
    case LinkKind::sys: return pcie_gbps / 2;
  }
  return 0;
}

std::string describe_topology(const Topology& t, const TopologySummary& s) {
  std::ostringstream out;
  out << "topology from " << t.source << "\n";
  if (t.gpu_count() == 0) {
    out << "class: " << node_class_name(s.node_class) << " (" << t.sockets << " socket(s), " << t.numa_nodes
        << " NUMA node(s), " << t.cores << " cores)\n";
    out << "strategy: ranks on this node exchange data through shared memory, bounded by memory bandwidth; "
           "sharding (zero1-zero3) saves host memory at the price of more traffic through it. Across nodes the "
           "network is the slow level: hsdp keeps the sharded traffic inside each node.\n";
    return out.str();
  }
  std::size_t width = 6;
  for (const auto& g : t.gpus) width = std::max(width, g.size() + 2);
  auto pad = [&](const std::string& x) {
    std::string cell = x;
    cell.append(width > x.size() ? width - x.size() : 1, ' ');
    return cell;
  };
  out << pad("");
  for (const auto& g : t.gpus) out << pad(g);
  out << "\n";
  for (int i = 0; i < t.gpu_count(); ++i) {
    out << pad(t.gpus[i]);
    for (int j = 0; j < t.gpu_count(); ++j) out << pad(link_name(t.gpu_gpu[i][j]));
    out << "\n";
  }
  out << "class: " << node_class_name(s.node_class) << "\n";
  std::vector<std::string> groups;
  for (const auto& g : s.fast_groups) {
    std::vector<std::string> names;
    for (int i : g) names.push_back(t.gpus[i]);
    std::string group = "{";  // (built in steps: GCC 12 warns falsely on "{" + std::string&&)
    group += join(names, ", ");
    group += "}";
    groups.push_back(group);
  }
  out << "fast groups: " << join(groups, " ") << " (inside: " << link_name(s.within) << ", ~"
      << link_gbps(s.within) << " GB/s per direction";
  if (s.fast_groups.size() > 1) out << "; between groups: " << link_name(s.across) << ", ~" << link_gbps(s.across) << " GB/s";
  out << ")\n";
  if (!t.nics.empty()) {
    out << "NICs:";
    for (const auto& p : s.nics) out << " " << t.gpus[p.gpu] << "->" << t.nics[p.nic] << " (" << link_name(p.link) << ")";
    out << "\n";
  } else {
    out << "NICs: none in this output\n";
  }
  out << "strategy: ";
  switch (s.node_class) {
    case NodeClass::single_gpu:
      out << "one GPU: nothing to exchange inside the node; across nodes, ddp while the model fits, else shard.";
      break;
    case NodeClass::nvswitch:
    case NodeClass::nvlink_full_mesh:
      out << "every GPU reaches every other at NVLink speed: ddp while the model fits in one GPU (least traffic, "
             "and it overlaps backward); when it does not, zero2/zero3 shard it at 1.5x ddp's traffic over fast links.";
      break;
    case NodeClass::nvlink_partial:
    case NodeClass::pcie_cross_socket:
      if (s.fast_groups.size() > 1)
        out << "GPUs are fast in groups of " << s.fast_groups.front().size() << " and slow (" << link_name(s.across)
            << ") between them: hsdp with groups of " << s.fast_groups.front().size()
            << " keeps the gathers inside the fast links and sends one all-reduce of the shard across the slow ones; "
               "ddp or zero3 over all GPUs run at the speed of the slowest link.";
      else
        out << "no subset of GPUs is faster than the rest: the whole node runs at " << link_name(s.within)
            << " speed; ddp sends least while the model fits, zero2/zero3 when it does not.";
      break;
    case NodeClass::pcie_switch:
    case NodeClass::pcie_host_bridge:
      out << "PCIe links only: traffic is the cost. ddp sends least while the model fits; sharding (zero2, zero3) "
             "buys memory with more traffic over PCIe.";
      break;
    case NodeClass::cpu_only: break;
  }
  out << "\n";
  return out.str();
}

}  // namespace st
