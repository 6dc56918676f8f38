#pragma once
#include <cstdint>

#include "deck/config.hpp"

namespace st {

// Learning rate for a 0-based step: linear warmup to optimizer.lr over warmup_steps, then
// cosine, linear or no decay to optimizer.min_lr at the last step.
double learning_rate(const OptimizerConfig& optimizer, std::int64_t step, std::int64_t total_steps);

}  // namespace st
