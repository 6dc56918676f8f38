#include "train/train_deck.hpp"

#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/error.hpp"
#include "plan/fit.hpp"
#include "runtime/device_choice.hpp"
#include "train/run_dir.hpp"

namespace st {
namespace {

// The planner's table and choice, kept in the run directory next to the resolved deck.
void write_plan_file(const Config& config, const std::string& table) {
  const std::string dir = resolve_out_dir(config);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create run directory '" + dir + "' (run.out_dir): " + ec.message());
  std::ofstream out(dir + "/plan.txt");
  out << table;
  if (!out) throw Error("cannot write '" + dir + "/plan.txt'");
}

}  // namespace

TrainSummary train_deck(Config& config, World& world, const MachineOptions& options, const std::string& save_params) {
  // Before anything is allocated: "auto" becomes the planner's choice, and a deck that cannot
  // fit in this machine's memory is refused with what would fit.
  // On GPUs the plan and the memory check are the GPUs' (refused here already where the deck
  // asks for a GPU this node lacks).
  const int node_ranks = deck_ranks_per_node(config, world.size());
  const DeviceChoice device = choose_device(config.parallel.device, world.comm(), config.deck_path, node_ranks);
  const Machine machine = deck_machine(config, world, device, options, 0);
  if (config.parallel.strategy == StrategyKind::automatic) {
    const std::string table = resolve_auto_strategy(config, machine);
    if (world.is_root()) {
      std::cout << "parallel.strategy = \"auto\": the planner's table\n" << table << std::flush;
      write_plan_file(config, table);
    }
  }
  resolve_grad_reduction(config, machine);
  check_memory_fits(config, machine);
  // The deck may group ranks into emulated nodes: the training world is built from it.
  World training_world(world.comm(), node_ranks);
  Trainer trainer(config, training_world, device);
  const TrainSummary summary = trainer.run();
  if (!save_params.empty()) trainer.save_params(save_params);
  return summary;
}

}  // namespace st
