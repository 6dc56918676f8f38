#pragma once
// The wiring of one node: which devices it has and how each pair is connected, as
// `nvidia-smi topo -m` reports it, and what follows from it (the class of the node, the groups
// of GPUs that are fast together, where the NICs sit, the bandwidth of each link).
#include <string>
#include <vector>

namespace st {

// A path between two devices, best first (the order of `nvidia-smi topo -m`'s legend).
enum class LinkKind { self, nvlink, pix, pxb, phb, node, sys };

struct Link {
  LinkKind kind = LinkKind::sys;
  int nvlinks = 0;  // NV#: the number of bonded NVLinks
};

// "X", "NV12", "PIX", ...
std::string link_name(const Link& link);

// Where a GPU's best NIC sits (the first NIC with the best path to it), or -1 without NICs.
struct NicPlacement {
  int gpu = 0;
  int nic = -1;
  Link link;
};

enum class NodeClass {
  cpu_only,           // no GPU: ranks share host memory
  single_gpu,         // one GPU
  nvswitch,           // every pair on the same NV# with more links than a GPU can give each peer: a switch
  nvlink_full_mesh,   // every pair on NVLink, wired directly (no switch)
  nvlink_partial,     // NVLink on some pairs (bridged pairs, hybrid cube-mesh), PCIe elsewhere
  pcie_switch,        // PCIe only, every pair under PCIe switches (PIX/PXB): no host bridge crossed
  pcie_host_bridge,   // PCIe only, through host bridges of one socket (PHB/NODE)
  pcie_cross_socket,  // PCIe only, some pairs cross the inter-socket link (SYS)
};
std::string node_class_name(NodeClass c);

struct Topology {
  std::string source;                     // the file, "nvidia-smi", "NVML" or "hwloc"
  std::vector<std::string> gpus;          // GPU0, GPU1, ...
  std::vector<std::string> nics;          // NIC0 / mlx5_0 ... (the NIC Legend's names where given)
  std::vector<std::vector<Link>> gpu_gpu; // gpus x gpus
  std::vector<std::vector<Link>> gpu_nic; // gpus x nics
  std::vector<std::string> cpu_affinity;  // per GPU, "" when the output has no such column
  std::vector<std::string> numa_affinity;
  // CPU-only nodes (hwloc): sockets, NUMA nodes and cores of the host.
  int sockets = 0, numa_nodes = 0, cores = 0;

  int gpu_count() const { return static_cast<int>(gpus.size()); }
};

// Parses the text of `nvidia-smi topo -m` (any number of GPUs and NICs, affinity columns or
// not, legend or not, tabs or spaces). `name` names the source in errors, which are st::Error
// carrying "name:line: what is wrong".
Topology parse_nvidia_smi_topo(const std::string& text, const std::string& name);
// Reads and parses a saved output.
Topology read_topology_file(const std::string& path);

// What follows from a topology.
struct TopologySummary {
  NodeClass node_class = NodeClass::cpu_only;
  // GPUs that are fast together: equal-sized groups where every pair inside has a better link
  // than the pairs across (one group of all GPUs when no subset is faster).
  std::vector<std::vector<int>> fast_groups;
  Link within;  // the worst link inside a fast group
  Link across;  // the worst link between groups (the same as `within` for one group)
  std::vector<NicPlacement> nics;  // per GPU
};
TopologySummary summarize(const Topology& topology);

// Bandwidth of one link per direction in GB/s (docs/planner.md, "Link bandwidths", gives the sources): NVLink 25
// GB/s per link (generations 2-4); PCIe x16 `pcie_gbps` (Gen4: 32) under switches; a path
// through a host bridge or across sockets at half of it (peer-to-peer through host memory).
double link_gbps(const Link& link, double pcie_gbps = 32.0);

// The matrix, the class, the groups, the NICs and what follows for the strategy, in words.
std::string describe_topology(const Topology& topology, const TopologySummary& summary);

}  // namespace st
