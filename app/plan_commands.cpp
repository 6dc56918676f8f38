// `shardtrain topo` and `shardtrain plan`: the wiring of a node, and what each strategy would
// need and take on it.
#include <iostream>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "deck/parse.hpp"
#include "deck/read.hpp"
#include "plan/planner.hpp"
#include "topology/detect.hpp"
#include "train/run_settings.hpp"

namespace st::app {

int topo_command(const std::string& file, World& world) {
  return on_root(world, [&] {
    if (!file.empty()) {
      const Topology t = read_topology_file(file);
      std::cout << describe_topology(t, summarize(t));
      return;
    }
    const DetectedTopology d = detect_topology();
    std::cout << describe_topology(d.topology, summarize(d.topology));
    for (const auto& note : d.notes) std::cout << "note: " << note << "\n";
  });
}

int plan_command(const DeckRequest& request, const MachineOptions& options, int ranks, World& world) {
  const Config config = load_config(request, world);
  // GPUs from --topology, or found on this host; otherwise the CPU node this job runs on.
  Topology topology;
  double gpu_memory = 0;
  if (!options.topology_file.empty()) {
    topology = read_topology_file(options.topology_file);
  } else {
    const DetectedTopology d = detect_topology();
    topology = d.topology;
    gpu_memory = d.gpu_memory_bytes;
  }
  Machine machine;
  if (topology.gpu_count() > 0) machine = gpu_plan_machine(topology, gpu_memory, options);
  else machine = job_machine(config, world, ranks > 0 ? ranks : world.size(), options, ranks == 0, true);
  if (machine.gpu) refuse_gpu_bf16_activations(config);
  const PlanResult plan = plan_strategies(config, machine);
  if (world.is_root()) {
    std::cout << "deck: " << request.deck_path << " (parallel.strategy = \"" << config.parallel.strategy << "\", "
              << config.parallel.precision << ")\n"
              << format_plan(plan, machine);
  }
  return plan.chosen >= 0 ? kExitOk : kExitFailure;
}

}  // namespace st::app
