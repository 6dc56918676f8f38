#include "plan/job_machine.hpp"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "comm/group.hpp"
#include "comm/values.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "data/batches.hpp"
#include "exec/gemm_rate.hpp"
#include "exec/threads.hpp"
#include "model/deck_shape.hpp"
#include "plan/probe.hpp"
#include "topology/detect.hpp"

namespace st {

int deck_ranks_per_node(const Config& config, int world_size) {
  std::string origin = config.deck_path + ": parallel.ranks_per_node";
  long k = config.parallel.ranks_per_node;
  if (k == 0) {
    const char* env = std::getenv("SHARDTRAIN_RANKS_PER_NODE");
    if (!env || !*env) return 0;
    char* end = nullptr;
    k = std::strtol(env, &end, 10);
    if (*end != '\0' || k < 0 || k > 65536)
      throw Error(std::string("SHARDTRAIN_RANKS_PER_NODE = '") + env + "' is not an integer in [0, 65536]",
                  ErrorScope::all_ranks);
    origin = "SHARDTRAIN_RANKS_PER_NODE";
  }
  if (k > 0 && world_size % k != 0)
    throw Error(origin + " = " + std::to_string(k) + " does not divide the " + std::to_string(world_size) + " ranks",
                ErrorScope::all_ranks);
  return static_cast<int>(k);
}

Machine job_machine(const Config& config, World& world, int world_size, const MachineOptions& o, bool job,
                    bool probe) {
  const int W = world_size;
  int K = deck_ranks_per_node(config, W);
  if (K == 0) K = o.nodes > 0 ? W / o.nodes : job ? world.local_size() : W;
  // Every rank must plan the same machine: nodes of unequal size are planned as the smallest.
  if (job) K = min_over(K, world.comm());
  if (K <= 0 || W % K != 0)
    throw Error(config.deck_path + ": " + std::to_string(W) + " ranks do not split into " + std::to_string(o.nodes) +
                    " nodes (--nodes)",
                ErrorScope::all_ranks);
  const int nodes = W / K;
  // Ranks that share this host's memory and cores.
  const int host_ranks = job ? world.host_ranks() : o.nodes > 0 ? K : W;
  const bool emulated = nodes > 1 && host_ranks > K;

  CpuRates rates;
  double node_mem_gb = o.node_mem_gb;
  std::string source;
  double available = 0;
  if (node_mem_gb > 0) {
    available = node_mem_gb * 1024.0 * 1024.0 * 1024.0;
    source = "--node-mem-gb";
  } else {
    available = host_available_bytes(&source);
  }
  // An override is the memory of one node (emulated or not) for its K ranks; what the host
  // reports is shared by every rank on the host.
  const bool per_node = source != "MemAvailable";
  const int sharing = per_node ? K : host_ranks;
  double per_rank = available / sharing;
  if (job) per_rank = min_over(per_rank, world.comm());
  rates.memory_per_rank = per_rank;
  rates.memory_source = source + " " + format_bytes(available) + " / " + std::to_string(sharing) + " rank(s)";

  std::string rate_source;
  rates.threads = choose_thread_count(static_cast<int>(config.run.threads), host_ranks);
  if (probe) {
    // The rate the ranks will compute at: their thread count, all of the host's ranks busy.
    apply_thread_count(rates.threads);
    const BatchPlan batches = plan_batches(config.data, config.model.seq_len, W, config.deck_path);
    const ModelShape shape = model_shape(config.model);
    const int micro = static_cast<int>(batches.micro_batch);
    // The model's own forward and backward when a copy of it fits easily beside what runs;
    // else the sgemm rate of its widest matmul (which leaves out the other kernels).
    int whole_model = model_probe_bytes(shape, micro) < 0.25 * per_rank ? 1 : 0;
    if (job) whole_model = min_over(whole_model, world.comm());
    if (job) barrier(world.comm());
    double rate[2] = {whole_model ? measure_model_flops(shape, micro)
                                  : measure_sgemm_flops(static_cast<int>(batches.micro_batch * config.model.seq_len),
                                                        static_cast<int>(shape.widest_linear()),
                                                        static_cast<int>(config.model.d_model)),
                      measure_copy_gbps(0.2)};
    if (job) reduce_each(std::span<double>(rate), Reduction::min, world.comm());
    rate_source = whole_model ? "the model's forward + backward, measured now" : "sgemm, measured now";
    rates.sgemm_flops = rate[0];
    rates.copy_gbps = rate[1];
    if (!job) {
      // Measured alone: the host's ranks will share its cores and its memory bus.
      const double cpus = std::max(1u, std::thread::hardware_concurrency());
      rates.sgemm_flops *= std::min(1.0, cpus / host_ranks);
      rates.copy_gbps /= host_ranks;
      rate_source += " alone, shared by " + std::to_string(host_ranks) + " rank(s)";
    }
  } else {
    rates.sgemm_flops = 1e12;  // not used: only memory is asked of this machine
    rates.copy_gbps = 1;
  }
  double inter = o.inter_node_gbps > 0 ? o.inter_node_gbps : config.parallel.inter_node_gbps;
  if (inter <= 0 && emulated) inter = rates.copy_gbps;  // emulated nodes, not throttled: shared memory
  if (!probe && inter <= 0) inter = 1;                  // not used
  const double latency = o.inter_node_latency_us > 0 ? o.inter_node_latency_us : config.parallel.inter_node_latency_us;
  Topology host;
  host.source = "hwloc";
  fill_host_counts(host);
  Machine m = cpu_machine(host, nodes, K, rates, inter, latency);
  if (probe) m.flops_source = rate_source;
  if (emulated) m.description += ", nodes emulated on one host";
  return m;
}

Machine gpu_plan_machine(const Topology& topology, double detected_gpu_memory, const MachineOptions& o) {
  double mem = o.gpu_mem_gb > 0 ? o.gpu_mem_gb : detected_gpu_memory / (1024.0 * 1024.0 * 1024.0);
  const double tflops = o.tflops > 0 ? o.tflops : 100.0;
  Machine m = gpu_machine(topology, o.nodes > 0 ? o.nodes : 1, o.gpus_per_node, mem, tflops, o.inter_node_gbps,
                          o.inter_node_latency_us);
  if (o.tflops <= 0) m.assumptions.push_back("100 TFLOP/s per GPU (give --tflops for your GPUs)");
  return m;
}

Machine gpu_job_machine(const Config& config, World& world, const DeviceChoice& device, const MachineOptions& o) {
  MachineOptions options = o;
  options.nodes = o.nodes > 0 ? o.nodes : world.node_count();
  options.gpus_per_node = world.size() / options.nodes;
  double memory = o.gpu_mem_gb > 0 ? o.gpu_mem_gb * 1024.0 * 1024.0 * 1024.0 : cuda_device_memory_bytes(device.device);
  // Ranks that share a GPU share its memory: each plans with its part.
  const int sharing = max_over(device.ranks_on_device, world.comm());
  memory = min_over(memory / device.ranks_on_device, world.comm());
  if (options.inter_node_gbps <= 0) options.inter_node_gbps = config.parallel.inter_node_gbps;
  if (options.inter_node_latency_us <= 0) options.inter_node_latency_us = config.parallel.inter_node_latency_us;
  std::vector<std::string> assumed;
  if (options.nodes > 1 && options.inter_node_gbps <= 0) {
    options.inter_node_gbps = 25;  // one 200 Gb/s link per node
    assumed.push_back("25 GB/s between nodes (give --inter-node-gbps or parallel.inter_node_gbps)");
  }
  Topology topology;
  std::string note;
  try {
    topology = !o.topology_file.empty() ? read_topology_file(o.topology_file) : detect_topology().topology;
  } catch (const Error& e) {
    note = e.what();
  }
  Machine m;
  if (topology.gpu_count() >= options.gpus_per_node) {
    m = gpu_plan_machine(topology, memory, options);
  } else {
    // The wiring could not be read: plan the links as the CPU node's, with the GPUs' memory.
    m = job_machine(config, world, world.size(), o, true, false);
    m.gpu = true;
    m.memory_per_rank = memory;
    m.memory_source = "the GPU's memory";
    m.assumptions.push_back("the GPUs' links could not be read (" + (note.empty() ? "no GPU in the topology" : note) +
                            "): planned as the host's");
  }
  if (memory > 0)
    m.memory_source = "GPU memory " + format_bytes(memory) + " per rank" +
                      (sharing > 1 ? " (a GPU shared by up to " + std::to_string(sharing) + " ranks)" : "");
  for (const auto& a : assumed) m.assumptions.push_back(a);
  return m;
}

Machine deck_machine(const Config& config, World& world, const DeviceChoice& device, const MachineOptions& options,
                     int ranks) {
  const bool automatic = config.parallel.strategy == StrategyKind::automatic;
  if (device.cuda && ranks == 0) return gpu_job_machine(config, world, device, options);
  return job_machine(config, world, ranks > 0 ? ranks : world.size(), options, ranks == 0, automatic);
}

}  // namespace st
