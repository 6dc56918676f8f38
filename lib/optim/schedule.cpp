#include "optim/schedule.hpp"

#include <algorithm>
#include <cmath>

namespace st {

double learning_rate(const OptimizerConfig& o, std::int64_t step, std::int64_t total_steps) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  if (o.schedule == LrSchedule::constant) return o.lr;
  const std::int64_t decay_steps = std::max<std::int64_t>(1, total_steps - o.warmup_steps - 1);
  const double progress = std::clamp(static_cast<double>(step - o.warmup_steps) / static_cast<double>(decay_steps), 0.0, 1.0);
  if (o.schedule == LrSchedule::linear) return o.lr - (o.lr - o.min_lr) * progress;
  return o.min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (o.lr - o.min_lr);
}

std::vector<std::string> schedule_warnings(const OptimizerConfig& o, std::int64_t total_steps) {
  std::vector<std::string> out;
  const std::string steps = "run.steps = " + std::to_string(total_steps);
  if (o.warmup_steps >= total_steps)
    out.push_back("optimizer.warmup_steps = " + std::to_string(o.warmup_steps) + " is not below " + steps +
                  ": the learning rate is still warming up when the run ends and never reaches optimizer.lr");
  else if (o.schedule != LrSchedule::constant && o.warmup_steps * 2 > total_steps)
    out.push_back("optimizer.warmup_steps = " + std::to_string(o.warmup_steps) + " is over half of " + steps +
                  ": the " + name_of(o.schedule) + " decay has less than half the run");
  if (o.schedule == LrSchedule::constant && o.min_lr > 0)
    out.push_back("optimizer.min_lr is set but optimizer.schedule = \"constant\" never uses it");
  return out;
}

}  // namespace st
