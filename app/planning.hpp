#pragma once
// The planner at the command line: the machine a deck will run on, `parallel.strategy = "auto"`
// resolved into a strategy, and the memory check made before anything is allocated.
#include <string>

#include "comm/world.hpp"
#include "deck/config.hpp"
#include "plan/machine.hpp"
#include "parallel/plan.hpp"
#include "plan/planner.hpp"

namespace st::app {

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
// reports it. Collective over `world`: the smallest GPU memory counts.
Machine gpu_job_machine(const Config& config, World& world, int cuda_device, const MachineOptions& options);

// The parallel plan the deck's run would make on the machine's world (its nodes are the
// machine's: hsdp's group is parallel.shard_group, else the node).
ParallelPlan deck_plan(const Config& config, const Machine& machine);

// Refuses (st::Error, every rank alike) a deck whose tensor degree the machine's ranks or the
// model cannot split (naming parallel.tensor), or whose strategy needs more memory per rank than
// the machine has, naming the figure, the limit and the strategies and rank counts that would fit.
void check_memory_fits(const Config& config, const Machine& machine);

// parallel.strategy = "auto": plans, rewrites config.parallel.strategy (and shard_group for hsdp)
// with the choice, notes the origin; returns the table and the reason as printed.
std::string resolve_auto_strategy(Config& config, const Machine& machine);

}  // namespace st::app
