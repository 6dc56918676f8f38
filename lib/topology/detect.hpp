#pragma once
// The topology of the host this process runs on.
#include <string>
#include <vector>

#include "topology/topology.hpp"

namespace st {

struct DetectedTopology {
  Topology topology;
  double gpu_memory_bytes = 0;     // per GPU (NVML), 0 when unknown
  std::vector<std::string> notes;  // what was tried and why it was not used
};

// Tries, in order: `nvidia-smi topo -m` (when nvidia-smi is on PATH and exits 0), NVML loaded at
// run time (libnvidia-ml.so.1: device count, common PCIe ancestor and NVLink peer-to-peer of
// each pair), and hwloc for a CPU-only node (sockets, NUMA nodes, cores). hwloc failing is an
// error; the GPU sources failing are notes.
DetectedTopology detect_topology();

// Host-level facts hwloc reports: sockets, NUMA nodes, cores (physical).
void fill_host_counts(Topology& topology);

// The path of an executable on PATH, or "".
std::string find_on_path(const std::string& program);

// Runs a command through the shell and returns its standard output; *status gets the exit status
// (-1 when it could not be started).
std::string run_command(const std::string& command, int* status);

}  // namespace st
