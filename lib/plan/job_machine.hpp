#pragma once
// The machine a deck's job runs on, as the planner sees it: this job's ranks grouped into nodes,
// their memory and compute rate (probed on CPU nodes, the GPUs' own figures and wiring on GPU
// nodes), and what the command line says instead.
#include <string>

#include "comm/world.hpp"
#include "deck/config.hpp"
#include "plan/machine.hpp"
#include "runtime/device_choice.hpp"

namespace st {

// What the command line may say about the machine (0 / "": detect or take from the deck).
struct MachineOptions {
  std::string topology_file;
  int nodes = 0;
  int gpus_per_node = 0;
  double gpu_mem_gb = 0;
  double tflops = 0;
  double inter_node_gbps = 0;
  double inter_node_latency_us = 0;
  double node_mem_gb = 0;  // memory of one node, shared by its ranks (else SHARDTRAIN_NODE_MEM_GB, else MemAvailable)
};

// parallel.ranks_per_node, or SHARDTRAIN_RANKS_PER_NODE when the deck leaves it at 0 (0: real
// nodes). Throws Error naming where it came from when it does not divide world_size.
int deck_ranks_per_node(const Config& config, int world_size);

// The CPU machine a deck runs on with `world_size` ranks. `job`: the ranks of `world` are the
// job's and probe together (their slowest figures count); otherwise this process plans alone for
// world_size ranks on one host (or --nodes hosts). `probe`: measure the sgemm and memory copy
// rates (a second or so); without it only the memory figures are meaningful.
Machine job_machine(const Config& config, World& world, int world_size, const MachineOptions& options, bool job,
                    bool probe);
// A GPU machine from --topology (or the detected GPUs).
Machine gpu_plan_machine(const Topology& topology, double detected_gpu_memory, const MachineOptions& options);

// The GPUs a job runs on (parallel.device chose cuda): this node's topology (detected, or
// options.topology_file), the job's nodes and ranks per node, each GPU's memory as the device
// reports it, split between the ranks that share a GPU (device.ranks_on_device). Collective over
// `world`: the smallest share counts.
Machine gpu_job_machine(const Config& config, World& world, const DeviceChoice& device, const MachineOptions& options);

// The machine `run` (ranks = 0) and `check` (ranks: --ranks, 0 for this job) plan with: the job's
// GPUs when the deck computes on them (device.cuda) and the job's own ranks are planned for,
// else the CPU node (its rates probed only for parallel.strategy = "auto", which needs them).
Machine deck_machine(const Config& config, World& world, const DeviceChoice& device, const MachineOptions& options,
                     int ranks);

}  // namespace st
