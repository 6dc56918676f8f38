#include "parallel/plan.hpp"

#include "comm/communicator.hpp"
#include "parallel/shard_layout.hpp"

namespace st {

StrategyPlan plan_strategy(const ParamLayout& layout, StrategyKind strategy, Precision precision,
                           int world_size, int group_size, std::int64_t micro_batches) {
  const int stage = zero_stage(strategy);
  const bool hsdp = strategy == StrategyKind::hsdp;
  const int n = hsdp ? group_size : world_size;
  const ShardLayout shards(layout, n);
  const bool mixed = precision == Precision::bf16;
  const std::uint64_t t = mixed ? 2 : 4;  // bytes of a parameter or gradient

  StrategyPlan plan;
  MemoryReport& m = plan.memory;
  m.params = (stage < 3 ? shards.padded_total() : shards.shard_total()) * t;
  m.grads = (stage < 2 ? shards.padded_total() : shards.shard_total()) * t;
  const std::uint64_t optimizer_elements = stage == 0 ? shards.flat_total() : shards.shard_total();
  m.optimizer = optimizer_elements * 4 * (mixed ? 3 : 2);  // (master,) m, v in fp32

  if (n > 1) {
    std::uint64_t sent = 0;
    for (std::size_t s = 0; s < shards.segments().size(); ++s) {
      const std::uint64_t segment = shards.padded(s) * t;
      // ddp: an all-reduce (2 x); zero1/zero2: a reduce-scatter and an all-gather; zero3: a gather
      // for each forward and backward of every micro-batch, and one reduce-scatter.
      const std::uint64_t passes = stage < 3 ? 2 : static_cast<std::uint64_t>(2 * micro_batches + 1);
      sent += passes * ring_share(segment, n);
    }
    plan.group_bytes = sent;
  }
  const int replicas = world_size / n;
  if (hsdp && replicas > 1) plan.replica_bytes = 2 * ring_share(shards.shard_total() * t, replicas);
  return plan;
}

}  // namespace st
