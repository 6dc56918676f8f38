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
// (plan.global_batch sequences each; this rank forwards its share in micro-batches of
// plan.micro_batch). The sequences do not depend on the world size, so neither does the value.
// Collective.
double mean_loss(ShardedModel& net, BatchLoader& loader, const BatchPlan& plan, int rank, std::int64_t batches);

}  // namespace st
