#include "optim/schedule.hpp"

#include <algorithm>
#include <cmath>

namespace st {

double learning_rate(const OptimizerConfig& o, std::int64_t step, std::int64_t total_steps) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  if (o.schedule == "constant") return o.lr;
  const std::int64_t decay_steps = std::max<std::int64_t>(1, total_steps - o.warmup_steps - 1);
  const double progress = std::clamp(static_cast<double>(step - o.warmup_steps) / static_cast<double>(decay_steps), 0.0, 1.0);
  if (o.schedule == "linear") return o.lr - (o.lr - o.min_lr) * progress;
  return o.min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (o.lr - o.min_lr);
}

}  // namespace st
