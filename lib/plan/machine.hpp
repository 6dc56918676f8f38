#pragma once
// What the planner needs to know of the machine a job runs on: ranks and how they are wired,
// memory per rank, compute rate. Built from a detected or saved topology plus the figures the
// topology cannot give (node count, GPU memory, the network), or from probes on a CPU node.
#include <string>
#include <vector>

#include "topology/topology.hpp"

namespace st {

struct Machine {
  std::string description;     // one line, for the table's header
  bool gpu = false;
  int nodes = 1;
  int ranks_per_node = 1;
  double memory_per_rank = 0;  // bytes a rank may use (GPU memory, or host memory / ranks per host)
  std::string memory_source;   // where memory_per_rank came from, in words
  double flops_per_rank = 0;   // FLOP/s
  std::string flops_source;
  double memory_gbps = 0;      // per rank, for the optimizer step (0: not modelled)
  int threads_per_rank = 1;    // a CPU rank's OpenMP threads (attention works on as many heads at once)
  // Three levels of links: inside a fast group, between fast groups of a node, between nodes.
  int fast_group = 1;          // ranks per fast group (divides ranks_per_node)
  double fast_gbps = 0;        // per direction
  double node_gbps = 0;
  double inter_node_gbps = 0;
  std::string fast_link, node_link;  // names ("NV12", "SYS", "shared memory")
  double latency_s = 5e-6;           // per collective call inside a node
  double inter_latency_s = 0;        // added per call that crosses nodes
  std::vector<std::string> assumptions;  // figures not measured or given, said in the output

  int world() const { return nodes * ranks_per_node; }
};

// A GPU machine from a topology: `gpus_per_node` of its GPUs (0: all), `gpu_memory_gb` per GPU
// (GiB), `tflops` per GPU, the network between nodes in GB/s (needed when nodes > 1).
Machine gpu_machine(const Topology& topology, int nodes, int gpus_per_node, double gpu_memory_gb, double tflops,
                    double inter_node_gbps, double inter_node_latency_us);

// A CPU node (or several emulated ones): `ranks_per_node` ranks per node, rates probed.
struct CpuRates {
  double sgemm_flops = 0;      // per rank, measured with the ranks' thread count
  double copy_gbps = 0;        // per rank: its share of the host's memory copy rate
  int threads = 1;             // OpenMP/BLAS threads per rank
  double memory_per_rank = 0;  // bytes
  std::string memory_source;   // in words
};
Machine cpu_machine(const Topology& topology, int nodes, int ranks_per_node, const CpuRates& rates,
                    double inter_node_gbps, double inter_node_latency_us);

// /proc/meminfo's MemAvailable in bytes; SHARDTRAIN_NODE_MEM_GB (GiB), when set, replaces it
// (to plan for another node, and in tests). `source` says which.
double host_available_bytes(std::string* source);

// Bytes per second one thread copies (memcpy of 64 MiB, best of a few runs over `seconds`).
double measure_copy_gbps(double seconds = 0.3);

}  // namespace st
