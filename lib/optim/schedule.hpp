#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "deck/config.hpp"

namespace st {

// Learning rate for a 0-based step: linear warmup to optimizer.lr over warmup_steps, then
// cosine, linear or no decay to optimizer.min_lr at the last step.
double learning_rate(const OptimizerConfig& optimizer, std::int64_t step, std::int64_t total_steps);

// Settings of the schedule that cannot do what they say (warmup as long as the run or most of
// it, a minimum a constant rate never reaches), one sentence each naming the keys: `check` and `run` print them as warnings.
std::vector<std::string> schedule_warnings(const OptimizerConfig& optimizer, std::int64_t total_steps);

}  // namespace st
