#pragma once
// What a strategy will hold and send, computed from the layout before anything is allocated:
// `shardtrain check` prints it, and it is the same arithmetic the strategies allocate by.
#include <cstdint>
#include <string>

#include "model/layout.hpp"
#include "parallel/strategy.hpp"

namespace st {

struct StrategyPlan {
  MemoryReport memory;                 // model state of the rank with the largest shard (rank 0)
  std::uint64_t group_bytes = 0;       // sent per step within the sharding group (ddp: the world)
  std::uint64_t replica_bytes = 0;     // hsdp: sent per step across groups
};

// world_size ranks; group_size: hsdp's sharding group (else the world); micro_batches per step.
StrategyPlan plan_strategy(const ParamLayout& layout, StrategyKind strategy, Precision precision,
                           int world_size, int group_size, std::int64_t micro_batches);

}  // namespace st
