#include "train/sharded_model.hpp"

#include <optional>
#include <vector>

#include "core/error.hpp"
#include "data/batches.hpp"

namespace st {
namespace {

AdamWSettings adamw_settings(const OptimizerConfig& o) {
  return {o.beta1, o.beta2, o.eps, o.weight_decay, o.decay_embeddings, o.decay_norms_and_biases};
}

CommStack::Settings comm_settings(const ParallelConfig& p, const Execution& execution) {
  CommStack::Settings s;
  s.mode = p.collectives;
  s.intra_node = p.intra_node;
  s.timeout_seconds = p.collective_timeout_s;
  s.inter_gbps = p.inter_node_gbps;
  s.inter_latency_us = p.inter_node_latency_us;
  s.device_peers = execution.device_peers;
  s.device_staging = execution.device_staging;
  s.device_name = execution.device_comm_name;
  return s;
}

}  // namespace

ShardedModel::ShardedModel(const Config& config, World& world, Execution execution, int max_batch, Timeline* timeline,
                           Use use)
    : execution_(std::move(execution)), comms_(world, comm_settings(config.parallel, execution_)) {
  const bool inference = use == Use::inference;
  model_ = make_model<float>(model_shape(config.model), max_batch, *execution_.exec,
                             inference ? Recompute::full : recompute_of(config.model));
  scalar_memory_ = execution_.exec->allocate(sizeof(double));
  StrategyComms comms{comms_.collectives()};
  if (config.parallel.strategy == StrategyKind::hsdp && config.parallel.shard_group == 0 && !world.uniform())
      throw Error(config.deck_path + ": parallel.strategy = \"hsdp\" shards inside a node, but this job's nodes hold "
                                     "different numbers of ranks (or a node's ranks are not consecutive); set "
                                     "parallel.shard_group",
                  ErrorScope::all_ranks);
  // Forward passes only send nothing per step: micro-batches matter to the plan's traffic alone.
  const std::int64_t micro_batches =
      inference ? 1 : plan_batches(config.data, config.model.seq_len, world.size(), config.deck_path).accum_steps;
  plan_ = std::make_unique<ParallelPlan>(
      deck_plan(config, model_->layout(), world.size(), world.local_size(), micro_batches));
  if (plan_->grouped()) {
    const auto groups = comms_.groups(plan_->mesh().shards);
    comms.group = &groups.within;
    comms.replicas = &groups.across;
  }
  comms_.trace_to(timeline);
  strategy_ = make_strategy(*plan_, config.parallel.overlap, model_->layout(), {model_->forward_order(), model_->backward_order()},
                            adamw_settings(config.optimizer), comms, timeline, *execution_.exec, inference);
}

ShardedModel::~ShardedModel() = default;

void ShardedModel::init_params(std::uint64_t seed) {
  std::vector<float> full(model_->layout().total());
  model_->init_params(full, seed);
  strategy_->load_params(full);
}

double ShardedModel::sum_over_ranks(double value) {
  Exec& exec = *execution_.exec;
  double* at = scalar_memory_.as<double>().data();
  exec.upload(at, &value, sizeof value);
  const void* ready = exec.before_communication();
  comms_.collectives().all_reduce(Buffer::of(std::span<double>(at, 1), ready), ReduceOp::sum);
  exec.download(&value, at, sizeof value);
  return value;
}

Mesh deck_mesh(const Config& config, int world_size, int node_size) {
  return make_mesh(config.parallel.strategy, config.parallel.shard_group, world_size, node_size, config.deck_path);
}

ParallelPlan deck_plan(const Config& config, const ParamLayout& layout, int world_size, int node_size,
                       std::int64_t micro_batches) {
  return ParallelPlan(layout, config.parallel.strategy, config.parallel.precision,
                      deck_mesh(config, world_size, node_size), micro_batches, config.parallel.bucket_mb);
}

Recompute recompute_of(const ModelConfig& m) {
  const std::optional<Recompute> r = recompute_from_name(m.recompute);
  ST_REQUIRE(r.has_value(), "model.recompute was not validated");
  return *r;
}

}  // namespace st
