#pragma once
// Where a training run starts: from a checkpoint (checkpoint.resume: a file, or the newest valid
// one in the checkpoint directory, skipping those that cannot be resumed), from GPT-2 weights
// (model.init_from), or from the seed's initialisation; and what the user is told about it.
#include <cstdint>
#include <string>
#include <vector>

#include "comm/world.hpp"
#include "data/batches.hpp"
#include "deck/config.hpp"
#include "train/run_data.hpp"
#include "train/sharded_model.hpp"

namespace st {

struct RunStart {
  std::int64_t step = 0;           // optimizer steps already taken
  std::int64_t tokens_seen = 0;    // training tokens those steps read (global batches may have changed size)
  std::string run_id;              // the resumed checkpoint's run, or a new one for a run from step 0
  std::vector<std::string> notes;  // said once the run directory is open
};

// Fills the strategy's parameters (and optimizer state, from a checkpoint) and, when resuming,
// moves the training loader to the checkpoint's next batch. The checkpoint is the one
// locate_resume (ckpt/locate.hpp) picks, as `check` predicts. Collective. Throws Error (all
// ranks) for a named checkpoint that cannot be resumed, a checkpoint directory none of whose
// checkpoints fits the deck, or data that do not fit the checkpoint.
RunStart start_run(const Config& config, World& world, ShardedModel& net, const RunData& data,
                   BatchLoader& train_loader, const std::string& checkpoint_dir);

}  // namespace st
