#pragma once
// `shardtrain run`, from a parsed deck to the end of training: where the ranks compute, the
// machine they form, parallel.strategy = "auto" resolved by the planner (its table printed and
// kept as plan.txt in the run directory), the memory check made before anything is allocated,
// then the training run on the ranks grouped into nodes as the deck says.
#include <string>

#include "comm/world.hpp"
#include "deck/config.hpp"
#include "plan/job_machine.hpp"
#include "train/trainer.hpp"

namespace st {

// Trains `config` (with "auto" replaced by the planner's choice) on the ranks of `world`;
// `save_params`: where rank 0 writes the final parameters ("": nowhere). Collective. Throws
// Error for a deck the job cannot run.
TrainSummary train_deck(Config& config, World& world, const MachineOptions& machine, const std::string& save_params);

}  // namespace st
