#include "parallel/strategy.hpp"

#include "core/error.hpp"
#include "parallel/sharded.hpp"

namespace st {

int zero_stage(const std::string& strategy) {
  if (strategy == "ddp") return 0;
  if (strategy == "zero1") return 1;
  if (strategy == "zero2") return 2;
  if (strategy == "zero3" || strategy == "fsdp" || strategy == "hsdp") return 3;
  // The deck parser refuses the others already; this guards callers that bypass it.
  throw Error("parallel.strategy = \"" + strategy + "\" is not available in this build", ErrorScope::all_ranks);
}

std::unique_ptr<Strategy> make_strategy(const ParallelConfig& parallel, const ParamLayout& layout,
                                        const ExecutionOrder& order, const AdamWSettings& adamw, StrategyComms comms,
                                        Timeline* timeline, Exec& exec, bool parameters_only) {
  ShardingSettings settings;
  settings.parameters_only = parameters_only;
  settings.name = parallel.strategy;
  settings.stage = zero_stage(parallel.strategy);
  settings.bucket_bytes = static_cast<std::size_t>(parallel.bucket_mb * 1024 * 1024);
  settings.overlap = parallel.overlap;
  const bool hsdp = parallel.strategy == "hsdp";
  ST_REQUIRE(!hsdp || (comms.group && comms.replicas), "hsdp needs its group communicators");
  Communicator& group = hsdp ? *comms.group : comms.world;
  Communicator* replicas = hsdp ? comms.replicas : nullptr;
  if (parallel.precision == "bf16")
    return std::make_unique<ShardedStrategy<Bf16>>(layout, order, adamw, group, replicas, settings, timeline, exec);
  return std::make_unique<ShardedStrategy<float>>(layout, order, adamw, group, replicas, settings, timeline, exec);
}

}  // namespace st
