#include "train/sharded_model.hpp"

#include <optional>
#include <vector>

#include "core/error.hpp"

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
  model_ = std::make_unique<Gpt2<float>>(gpt2_shape(config.model), max_batch, *execution_.exec,
                                         inference ? Recompute::full : recompute_of(config.model));
  scalar_memory_ = execution_.exec->allocate(sizeof(double));
  StrategyComms comms{comms_.collectives()};
  shard_group_ = world.size();
  if (config.parallel.strategy == StrategyKind::hsdp) {
    if (config.parallel.shard_group == 0 && !world.uniform())
      throw Error(config.deck_path + ": parallel.strategy = \"hsdp\" shards inside a node, but this job's nodes hold "
                                     "different numbers of ranks (or a node's ranks are not consecutive); set "
                                     "parallel.shard_group",
                  ErrorScope::all_ranks);
    shard_group_ = hsdp_group_size(config.parallel, world.size(), world.local_size(), config.deck_path);
    const auto groups = comms_.groups(shard_group_);
    comms.group = &groups.within;
    comms.replicas = &groups.across;
  }
  comms_.trace_to(timeline);
  strategy_ = make_strategy(config.parallel, model_->layout(), {model_->forward_order(), model_->backward_order()},
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

int hsdp_group_size(const ParallelConfig& p, int world_size, int node_size, const std::string& deck_path) {
  const int group = p.shard_group > 0 ? static_cast<int>(p.shard_group) : node_size;
  if (world_size % group != 0)
    throw Error(deck_path + ": hsdp's sharding group of " + std::to_string(group) + " ranks (" +
                    (p.shard_group > 0 ? "parallel.shard_group = " + std::to_string(group)
                                       : std::string("parallel.shard_group = 0: the ranks of a node")) +
                    ") does not divide the world of " + std::to_string(world_size) +
                    " ranks; hsdp needs groups of equal size: set parallel.shard_group to a divisor of " +
                    std::to_string(world_size),
                ErrorScope::all_ranks);
  return group;
}

std::int64_t padded_vocab(std::int64_t vocab_size, std::int64_t pad_to) {
  return (vocab_size + pad_to - 1) / pad_to * pad_to;
}

Gpt2Shape gpt2_shape(const ModelConfig& m) {
  return {m.n_layer, m.d_model, m.n_head, m.seq_len, m.vocab_size, padded_vocab(m.vocab_size, m.vocab_pad_to)};
}

Recompute recompute_of(const ModelConfig& m) {
  const std::optional<Recompute> r = recompute_from_name(m.recompute);
  ST_REQUIRE(r.has_value(), "model.recompute was not validated");
  return *r;
}

}  // namespace st
