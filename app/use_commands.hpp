#pragma once
// Using a trained model: `shardtrain generate` and `shardtrain eval`, from a checkpoint file, its
// directory or a run directory, on any number of ranks (sharded as the checkpoint's deck says,
// or as --set parallel.strategy=... says).
#include <cstdint>
#include <string>
#include <vector>

#include "comm/world.hpp"

namespace st::app {

struct GenerateRequest {
  std::string checkpoint;
  std::vector<std::string> overrides;  // --set section.key=value over the checkpoint's deck
  std::string prompt;                  // text, encoded by the deck's data.tokenizer; default its document start
  std::string prompt_tokens;           // token ids, "1 2 3" or "1,2,3"
  int samples = 1;
  int tokens = 200;
  double temperature = 1.0;
  int top_k = 0;
  std::uint64_t seed = 1337;  // sample i draws with seed + i
  bool json = false;
};

struct EvalRequest {
  std::string checkpoint;
  std::vector<std::string> overrides;
  std::string data;          // another data file, all of it; default the deck's validation split
  std::int64_t batches = 0;  // 0: the deck's run.eval_batches
  bool json = false;
};

// Print samples (rank 0); every rank takes part in the forward passes. Returns the exit code.
int generate_command(const GenerateRequest& request, World& world);
// Print the mean loss and perplexity (rank 0), the value a training run's validation logs for
// the same checkpoint and batches.
int eval_command(const EvalRequest& request, World& world);

}  // namespace st::app
