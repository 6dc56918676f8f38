#include "train/sharded_model.hpp"

#include <algorithm>
#include <vector>

#include "comm/group.hpp"
#include "comm/watched.hpp"
#include "comm/watchdog.hpp"
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
  if (execution.has_device_communicators()) {
    // The execution outlives the communicators: ShardedModel holds it before them.
    s.device_peers = [&execution](MPI_Comm comm, TrafficLevel level, double timeout_seconds) {
      return execution.device_peers(comm, level, timeout_seconds);
    };
    s.device_staging = [&execution](Communicator& host) { return execution.device_staging(host); };
  }
  s.device_name = execution.device_comm_name();
  return s;
}

}  // namespace

struct ShardedModel::TensorRanks {
  OwnedComm group_comm, data_comm;
  std::unique_ptr<Communicator> backend;
  std::unique_ptr<Watchdog> watchdog;
  std::unique_ptr<WatchedCommunicator> group;  // the tensor group, watched for hangs
  std::unique_ptr<World> data_world;
  std::unique_ptr<CommStack> data;

  TensorRanks(const World& world, int degree, const CommStack::Settings& settings) {
    group_comm = split_group(world.comm(), world.rank() / degree, world.rank());
    const MPI_Comm split = group_comm.get();
    // Inside a node (deck_tensor_degree checks it): NVLink's NCCL on GPUs, shared memory or MPI
    // on CPU nodes, as the node's own collectives go.
    if (settings.device_peers)
      backend = settings.device_peers(split, TrafficLevel::intra, settings.timeout_seconds);
    else if (settings.intra_node == IntraNode::shm)
      backend = std::make_unique<ShmCommunicator>(split, TrafficLevel::intra);
    else
      backend = std::make_unique<MpiCommunicator>(split, TrafficLevel::intra, MpiWait::polling);
    watchdog = std::make_unique<Watchdog>(world.comm(), settings.timeout_seconds);
    group = std::make_unique<WatchedCommunicator>(*backend, *watchdog, "tensor");
    data_comm = split_group(world.comm(), world.rank() % degree, world.rank());
    // The emulated nodes hold node_size / degree of the data-parallel ranks each.
    data_world = std::make_unique<World>(data_comm.get(), world.emulated() ? world.local_size() / degree : 0);
    data = std::make_unique<CommStack>(*data_world, settings);
  }
};

ShardedModel::ShardedModel(const Config& config, World& world, std::unique_ptr<Execution> execution, int max_batch,
                           Timeline* timeline, Use use)
    : execution_(std::move(execution)), comms_(world, comm_settings(config.parallel, *execution_)) {
  const bool inference = use == Use::inference;
  const int degree = deck_tensor_degree(config, world.size(), world.local_size(), world.uniform());
  TensorGroup group;
  if (degree > 1) {
    tensor_ = std::make_unique<TensorRanks>(world, degree, comm_settings(config.parallel, *execution_));
    group = {{degree, world.rank() % degree}, tensor_->group.get(), config.parallel.sequence_parallel};
    if (config.parallel.sequence_parallel && (max_batch * config.model.seq_len) % degree != 0)
      throw Error(config.deck_path + ": parallel.sequence_parallel = true splits a micro-batch's " +
                      std::to_string(max_batch) + " x " + std::to_string(config.model.seq_len) +
                      " rows over parallel.tensor = " + std::to_string(degree) +
                      " ranks, which do not divide them (set data.micro_batch or model.seq_len so they do)",
                  ErrorScope::all_ranks);
  }
  const World& data_world = tensor_ ? *tensor_->data_world : world;
  model_ = make_model<float>(model_shape(config.model), max_batch, execution_->exec(),
                             inference ? Recompute::full : config.model.recompute, group);
  scalar_memory_ = execution_->exec().allocate(sizeof(StepScalars));
  StrategyComms comms{data_comms().collectives()};
  comms.tensor = group.comm;
  if (group.active()) comms.whole_layout = &model_->whole_layout();
  if (config.parallel.strategy == StrategyKind::hsdp && config.parallel.shard_group == 0 && !data_world.uniform())
      throw Error(config.deck_path + ": parallel.strategy = \"hsdp\" shards inside a node, but this job's nodes hold "
                                     "different numbers of ranks (or a node's ranks are not consecutive); set "
                                     "parallel.shard_group",
                  ErrorScope::all_ranks);
  // Forward passes only send nothing per step: micro-batches matter to the plan's traffic alone.
  const std::int64_t micro_batches =
      inference ? 1 : plan_batches(config.data, config.model.seq_len, data_world.size(), config.deck_path).accum_steps;
  parallel_plan_ = std::make_unique<ParallelPlan>(
      deck_plan(config, model_->layout(), world.size(), world.local_size(), micro_batches, max_batch));
  if (parallel_plan_->grouped()) {
    const auto groups = data_comms().groups(parallel_plan_->mesh().shards);
    comms.group = &groups.within;
    comms.replicas = &groups.across;
  }
  data_comms().trace_to(timeline);
  // On GPUs the tensor group's NCCL collectives run on this thread; the strategy's, overlapped,
  // on the progress thread, in an order that could differ between ranks, which NCCL does not
  // allow across communicators (it may hang). So there the strategy waits for each of its own.
  const bool overlap = config.parallel.overlap && !(group.active() && execution_->has_device_communicators());
  strategy_ = make_strategy(*parallel_plan_, overlap, model_->layout(), {model_->forward_order(), model_->backward_order()},
                            adamw_settings(config.optimizer), comms, timeline, execution_->exec(), inference);
}

ShardedModel::~ShardedModel() = default;

CommStack& ShardedModel::data_comms() { return tensor_ ? *tensor_->data : comms_; }

int ShardedModel::data_rank() const { return tensor_ ? tensor_->data_world->rank() : comms_.world().rank(); }
int ShardedModel::data_ranks() const { return tensor_ ? tensor_->data_world->size() : comms_.world().size(); }

ShardedModel::CommTotals ShardedModel::comm_totals() const {
  CommTotals totals{comms_.traffic(), 0, strategy_->comm_wait_seconds()};
  if (tensor_) {
    for (const LevelTraffic& more : {tensor_->data->traffic(), tensor_->backend->traffic()}) {
      totals.traffic.intra += more.intra;
      totals.traffic.inter += more.inter;
    }
    totals.tensor_bytes = tensor_->backend->traffic().total();
    totals.waited_seconds += tensor_->group->seconds_in_calls();
  }
  return totals;
}

void ShardedModel::init_params(std::uint64_t seed) {
  std::vector<float> whole(model_->whole_layout().total());
  model_->init_params(whole, seed);
  load_whole_params(whole);
}

void ShardedModel::load_whole_params(std::span<const float> whole) {
  // Under tensor parallelism the rank keeps its slice; otherwise the whole, without a copy.
  if (model_->tensor_group().active()) strategy_->load_params(model_->slice_of(whole));
  else strategy_->load_params(whole);
}

double ShardedModel::sum_over_ranks(double value) {
  Exec& exec = execution_->exec();
  double* at = scalar_memory_.as<double>().data();
  exec.upload(at, &value, sizeof value);
  sum_over_ranks_in_place(at);
  exec.download(&value, at, sizeof value);
  return value;
}

void ShardedModel::sum_over_ranks_in_place(double* value) {
  // The data-parallel ranks: a tensor group's ranks hold the same value.
  if (data_ranks() == 1) return;
  const void* ready = execution_->exec().before_communication();
  data_comms().collectives().all_reduce(Buffer::of(std::span<double>(value, 1), ready), ReduceOp::sum);
}

std::string tensor_split_note(int degree, int data_ranks) {
  if (degree <= 1) return "";
  return "; tensor parallel: each layer split over " + std::to_string(degree) + " consecutive ranks (" +
         std::to_string(data_ranks) + " data-parallel rank(s) per slice)";
}

}  // namespace st
