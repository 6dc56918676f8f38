#include "parallel/strategy.hpp"

#include "core/error.hpp"
#include "parallel/sharded.hpp"

namespace st {


std::unique_ptr<Strategy> make_strategy(const ParallelConfig& parallel, const ParamLayout& layout,
                                        const ExecutionOrder& order, const AdamWSettings& adamw, StrategyComms comms,
                                        Timeline* timeline, Exec& exec, bool parameters_only) {
  ShardingSettings settings;
  settings.parameters_only = parameters_only;
  settings.name = name_of(parallel.strategy);
  settings.stage = zero_stage(parallel.strategy);
  ST_REQUIRE(settings.stage >= 0, "parallel.strategy = \"auto\" must be resolved before the strategy is built");
  settings.bucket_bytes = static_cast<std::size_t>(parallel.bucket_mb * 1024 * 1024);
  settings.overlap = parallel.overlap;
  const bool hsdp = parallel.strategy == StrategyKind::hsdp;
  ST_REQUIRE(!hsdp || (comms.group && comms.replicas), "hsdp needs its group communicators");
  Communicator& group = hsdp ? *comms.group : comms.world;
  Communicator* replicas = hsdp ? comms.replicas : nullptr;
  if (parallel.precision == Precision::bf16)
    return std::make_unique<ShardedStrategy<Bf16>>(layout, order, adamw, group, replicas, settings, timeline, exec);
  return std::make_unique<ShardedStrategy<float>>(layout, order, adamw, group, replicas, settings, timeline, exec);
}

}  // namespace st
