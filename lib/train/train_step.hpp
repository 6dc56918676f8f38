#pragma once
// One optimizer step of the rank's model: the micro-batches' forward and backward passes, the
// gradients reduced, their global norm, clipping and AdamW. The step's scalars stay in the
// backend's memory (exec/step_scalars.hpp) from the first micro-batch's loss to the update, so a
// device runs the whole step without the host waiting for a value, and the host reads them once,
// at the end, for the log line.
#include <cstdint>
#include <functional>

#include "core/timeline.hpp"
#include "train/sharded_model.hpp"

namespace st {

struct StepSettings {
  std::int64_t micro_batches = 1;  // per data-parallel rank
  int micro_batch = 1;             // sequences in one
  int seq_len = 1;
  int data_ranks = 1;              // the losses' mean is over micro_batches x data_ranks
  double lr = 0;
  double grad_clip = 0;            // 0: no clipping
  std::int64_t step = 1;           // 1-based, for AdamW's bias correction
};

struct StepOutcome {
  double loss = 0;       // the global batch's mean loss
  double grad_norm = 0;  // before clipping
  // Both finite: otherwise the update was skipped (on every rank: both are sums over the ranks).
  bool finite() const;
};

// fill(micro) writes micro-batch `micro`'s tokens and targets (micro_batch x seq_len each) to
// `tokens` and `targets`, in host memory. Collective.
StepOutcome train_step(ShardedModel& net, const StepSettings& settings, const std::function<void(std::int64_t)>& fill,
                       const int* tokens, const int* targets, Timeline* timeline);

}  // namespace st
