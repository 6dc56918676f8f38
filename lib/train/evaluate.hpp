#pragma once
// The model's mean loss on batches of held-out sequences: the validation line of a training run
// and `shardtrain eval` compute it here, so the two give the same value for the same
// checkpoint and batches.
#include <cstdint>

#include "data/batches.hpp"
#include "train/sharded_model.hpp"

namespace st {

// Streams of the run's seed: training batches, validation batches.
inline constexpr std::uint64_t kTrainStream = 0, kValStream = 1;

// The mean loss per token over the first `batches` batches that `loader` gives from its start
// (batch_plan.global_batch sequences each; this rank forwards its share in micro-batches of
// batch_plan.micro_batch). The sequences do not depend on the world size, so neither does the value.
// Collective.
double mean_loss(ShardedModel& net, BatchLoader& loader, const BatchPlan& batch_plan, int rank, std::int64_t batches);

// Every token of `split` but its first predicted once, in order: windows of seq_len + 1 tokens
// that overlap by one (each predicts its last seq_len from what comes before in the window), the
// last window as short as what is left. The data-parallel ranks share the windows, forwarding up
// to `micro_batch` at a time. Collective.
struct InOrderLoss {
  double mean = 0;               // per predicted token
  std::int64_t predicted = 0;    // tokens predicted: the split's size less one
  std::int64_t windows = 0;      // of seq_len targets
  std::int64_t last_window = 0;  // targets of the shorter last window (0: none)
};
InOrderLoss mean_loss_in_order(ShardedModel& net, const Split& split, std::int64_t seq_len, std::int64_t micro_batch);

}  // namespace st
