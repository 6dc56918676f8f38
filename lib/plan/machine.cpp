#include "plan/machine.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.hpp"
#include "core/timer.hpp"

namespace st {

Machine gpu_machine(const Topology& t, int nodes, int gpus_per_node, double gpu_memory_gb, double tflops,
                    double inter_node_gbps, double inter_node_latency_us) {
  const TopologySummary s = summarize(t);
  if (t.gpu_count() == 0) throw Error(t.source + ": the topology has no GPU", ErrorScope::all_ranks);
  const int g = gpus_per_node > 0 ? gpus_per_node : t.gpu_count();
  if (g > t.gpu_count())
    throw Error("--gpus-per-node " + std::to_string(g) + " exceeds the " + std::to_string(t.gpu_count()) + " GPUs of " +
                    t.source,
                ErrorScope::all_ranks);
  if (nodes < 1) throw Error("--nodes must be at least 1", ErrorScope::all_ranks);
  if (nodes > 1 && inter_node_gbps <= 0)
    throw Error("planning for " + std::to_string(nodes) + " nodes needs the network's bandwidth: --inter-node-gbps X "
                "(GB/s per direction per GPU)",
                ErrorScope::all_ranks);
  if (gpu_memory_gb <= 0) throw Error("the GPU memory is unknown: give --gpu-mem GB", ErrorScope::all_ranks);
  Machine m;
  m.gpu = true;
  m.nodes = nodes;
  m.ranks_per_node = g;
  m.memory_per_rank = gpu_memory_gb * 1024.0 * 1024.0 * 1024.0;
  m.memory_source = "GPU memory";
  m.flops_per_rank = tflops * 1e12;
  m.flops_source = "--tflops";
  // The job uses GPUs 0..g-1; groups are the fast groups cut to those.
  m.fast_group = 1;
  for (const auto& group : s.fast_groups) {
    int inside = 0;
    for (int i : group) inside += i < g ? 1 : 0;
    m.fast_group = std::max(m.fast_group, inside);
  }
  if (g % m.fast_group != 0) m.fast_group = g;
  m.fast_gbps = link_gbps(m.fast_group > 1 ? s.within : s.across);
  m.fast_link = link_name(m.fast_group > 1 ? s.within : s.across);
  m.node_gbps = m.fast_group < g ? link_gbps(s.across) : m.fast_gbps;
  m.node_link = m.fast_group < g ? link_name(s.across) : m.fast_link;
  if (g == 1) m.fast_gbps = m.node_gbps = 0, m.fast_link = m.node_link = "none";
  m.inter_node_gbps = inter_node_gbps;
  m.inter_latency_s = inter_node_latency_us * 1e-6;
  std::ostringstream d;
  d << nodes << " node(s) x " << g << " GPU(s) (" << node_class_name(s.node_class) << ", " << t.source << ")";
  m.description = d.str();
  m.assumptions.push_back("link bandwidths from the link kinds (docs/planner.md, link bandwidths), not measured");
  return m;
}

Machine cpu_machine(const Topology& t, int nodes, int ranks_per_node, const CpuRates& rates, double inter_node_gbps,
                    double inter_node_latency_us) {
  if (nodes > 1 && inter_node_gbps <= 0)
    throw Error("planning for " + std::to_string(nodes) + " nodes needs the network's bandwidth: --inter-node-gbps X "
                "(or parallel.inter_node_gbps for emulated nodes)",
                ErrorScope::all_ranks);
  Machine m;
  m.nodes = nodes;
  m.ranks_per_node = ranks_per_node;
  m.memory_per_rank = rates.memory_per_rank;
  m.memory_source = rates.memory_source;
  m.flops_per_rank = rates.sgemm_flops;
  m.flops_source = "sgemm measured now";
  // Ranks of a host share its memory bus: shared-memory collectives and the optimizer's sweep
  // each get the rank's share of the copy rate.
  m.memory_gbps = rates.copy_gbps;
  m.threads_per_rank = rates.threads;
  m.fast_group = ranks_per_node;
  m.fast_gbps = m.node_gbps = rates.copy_gbps;
  m.fast_link = m.node_link = "shared memory";
  m.inter_node_gbps = inter_node_gbps;
  m.inter_latency_s = inter_node_latency_us * 1e-6;
  std::ostringstream d;
  d << nodes << " node(s) x " << ranks_per_node << " rank(s), CPU only (" << t.sockets << " socket(s), "
    << t.numa_nodes << " NUMA node(s), " << t.cores << " cores)";
  m.description = d.str();
  return m;
}

double host_available_bytes(std::string* source) {
  if (const char* env = std::getenv("SHARDTRAIN_NODE_MEM_GB"); env && *env) {
    char* end = nullptr;
    const double gb = std::strtod(env, &end);
    if (*end != '\0' || !(gb > 0))
      throw Error(std::string("SHARDTRAIN_NODE_MEM_GB = '") + env + "' is not a positive number of GiB",
                  ErrorScope::all_ranks);
    if (source) *source = "SHARDTRAIN_NODE_MEM_GB";
    return gb * 1024.0 * 1024.0 * 1024.0;
  }
  std::ifstream in("/proc/meminfo");
  if (!in) throw Error("/proc/meminfo: cannot open it to read the available memory");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream fields(line.substr(13));
      double kib = 0;
      std::string unit;
      if (!(fields >> kib >> unit) || unit != "kB")
        throw Error("/proc/meminfo: cannot read the line '" + line + "'");
      if (source) *source = "MemAvailable";
      return kib * 1024.0;
    }
  throw Error("/proc/meminfo: no MemAvailable line");
}

double measure_copy_gbps(double seconds) {
  // 64 MiB each way: larger than any cache, so the copy runs at memory speed.
  const std::size_t n = 64u << 20;
  std::vector<char> a(n, 1), b(n, 0);
  std::memcpy(b.data(), a.data(), n);  // touch the pages
  double best = 0;
  Stopwatch total;
  int runs = 0;
  while (runs < 3 || total.seconds() < seconds) {
    Stopwatch one;
    std::memcpy(b.data(), a.data(), n);
    // Bytes copied per second: a byte a shared-memory collective moves costs about one copy.
    best = std::max(best, static_cast<double>(n) / std::max(one.seconds(), 1e-9) / 1e9);
    if (++runs >= 30) break;
  }
  if (b[n / 2] != 1) throw Error("memory copy probe produced a wrong result");
  return best;
}

}  // namespace st
