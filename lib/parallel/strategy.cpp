#include "parallel/strategy.hpp"

#include "core/error.hpp"
#include "parallel/plan.hpp"
#include "parallel/sharded.hpp"

namespace st {


std::unique_ptr<Strategy> make_strategy(const ParallelPlan& plan, bool overlap, const ParamLayout& layout,
                                        const ExecutionOrder& order, const AdamWSettings& adamw, StrategyComms comms,
                                        Timeline* timeline, Exec& exec, bool parameters_only) {
  ShardingSettings settings;
  settings.parameters_only = parameters_only;
  settings.name = name_of(plan.strategy());
  settings.overlap = overlap;
  settings.tensor = comms.tensor;
  settings.whole_layout = comms.whole_layout;
  settings.mirrored_segments = comms.mirrored_segments;
  settings.bf16_params = plan.stores_bf16();
  const bool groups = plan.grouped();
  ST_REQUIRE(!groups || (comms.group && comms.replicas), "a plan sharding within groups needs its group communicators");
  Communicator& group = groups ? *comms.group : comms.world;
  Communicator* replicas = groups ? comms.replicas : nullptr;
  if (plan.mixed())
    return std::make_unique<ShardedStrategy<Bf16>>(plan, layout, order, adamw, group, replicas, settings, timeline, exec);
  return std::make_unique<ShardedStrategy<float>>(plan, layout, order, adamw, group, replicas, settings, timeline, exec);
}

}  // namespace st
