#include "train/sharded_model.hpp"

#include <algorithm>
#include <vector>

#include "comm/group.hpp"
#include "comm/watched.hpp"
#include "comm/watchdog.hpp"
#include "core/error.hpp"
#include "data/batches.hpp"
#include "model/bf16_storage_model.hpp"
#include "train/run_settings.hpp"

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
  return s;
}

// The deck's pipeline on `world`, or null without one (or for forward passes only: generate and
// eval run the whole model on each rank). Throws Error (all ranks) naming the key the job
// cannot follow.
std::unique_ptr<PipelineStage> make_pipeline(const Config& config, const World& world, ShardedModel::Use use) {
  const ParallelConfig& p = config.parallel;
  if (use == ShardedModel::Use::inference || (p.pipeline == 1 && p.virtual_stages == 1)) return nullptr;
  const std::int64_t micro_batches =
      plan_batches(config.data, config.model.seq_len, deck_data_ranks(config, world.size()), config.deck_path).accum_steps;
  const PipelineShape shape = deck_pipeline(config, world.size(), micro_batches);
  return std::make_unique<PipelineStage>(world, shape, p.pipeline_schedule, p.collective_timeout_s);
}

// parallel.activations = "bf16" needs this rank's backend to have kernels with bf16 storage: the
// host always has its reference; a GPU's are built on flash attention (refuse_gpu_bf16_activations),
// which needs an sm_80 or later device.
// Throws Error (all ranks) naming the key, before anything is allocated.
void require_bf16_storage_kernels(const Config& config, Exec& exec) {
  if (exec.space() == MemorySpace::device) refuse_gpu_bf16_activations(config);
  if (!exec.bf16_layer_kernels())
    throw Error(config.deck_path + ": parallel.activations = \"bf16\": this rank's device (" + exec.description() +
                    ") has no kernels with bf16 storage: their flash attention needs bf16 tensor cores (compute "
                    "capability 8.0 or later); set parallel.activations = \"fp32\"",
                ErrorScope::this_rank);  // a device of this rank's: the others may differ, so it aborts the job
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
    : execution_(std::move(execution)),
      pipeline_(make_pipeline(config, world, use)),
      comms_(pipeline_ ? pipeline_->stage_world() : world, comm_settings(config.parallel, *execution_)) {
  const bool inference = use == Use::inference;
  // Under a pipeline, the stage's ranks are the world the tensor groups and the strategy see.
  World& ranks = pipeline_ ? pipeline_->stage_world() : world;
  const int degree = deck_tensor_degree(config, ranks.size(), ranks.local_size(), ranks.uniform());
  TensorGroup group;
  if (degree > 1) {
    tensor_ = std::make_unique<TensorRanks>(ranks, degree, comm_settings(config.parallel, *execution_));
    group = {{degree, world.rank() % degree}, tensor_->group.get(), config.parallel.sequence_parallel};
    if (config.parallel.sequence_parallel && (max_batch * config.model.seq_len) % degree != 0)
      throw Error(config.deck_path + ": parallel.sequence_parallel = true splits a micro-batch's " +
                      std::to_string(max_batch) + " x " + std::to_string(config.model.seq_len) +
                      " rows over parallel.tensor = " + std::to_string(degree) +
                      " ranks, which do not divide them (set data.micro_batch or model.seq_len so they do)",
                  ErrorScope::all_ranks);
  }
  const World& data_world = tensor_ ? *tensor_->data_world : ranks;
  const Recompute recompute = inference ? Recompute::full : config.model.recompute;
  const bool bf16_activations = config.parallel.stores_bf16_activations();
  if (bf16_activations) require_bf16_storage_kernels(config, execution_->exec());
  if (pipeline_) {
    pipeline_->build_models(model_shape(config.model), max_batch, execution_->exec(), recompute, group, true,
                            bf16_activations);
    // On GPUs the stages' messages go through host memory (MPI between them), not NCCL's
    // send/recv: the host waits for each activation before it is sent.
    if (execution_->has_device_communicators())
      pipeline_->stage_through_host(execution_->exec(),
                                    [this](Communicator& host) { return execution_->device_staging(host); });
  } else {
    model_ = make_stored_model(model_shape(config.model), max_batch, execution_->exec(), recompute, group, ModelPart{},
                               bf16_activations);
  }
  scalar_memory_ = execution_->exec().allocate(sizeof(StepScalars));
  StrategyComms comms{data_comms().collectives()};
  comms.tensor = group.comm;
  if (group.active() || pipeline_) comms.whole_layout = &model().whole_layout();
  if (pipeline_) comms.mirrored_segments = pipeline_->mirrored_segments();
  if (config.parallel.strategy == StrategyKind::hsdp && config.parallel.shard_group == 0 && !data_world.uniform())
      throw Error(config.deck_path + ": parallel.strategy = \"hsdp\" shards inside a node, but this job's nodes hold "
                                     "different numbers of ranks (or a node's ranks are not consecutive); set "
                                     "parallel.shard_group",
                  ErrorScope::all_ranks);
  // Forward passes only send nothing per step: micro-batches matter to the plan's traffic alone.
  const std::int64_t micro_batches =
      inference ? 1 : plan_batches(config.data, config.model.seq_len, data_world.size(), config.deck_path).accum_steps;
  parallel_plan_ = std::make_unique<ParallelPlan>(
      deck_plan(config, layout(), ranks.size(), ranks.local_size(), micro_batches, max_batch,
                pipeline_ ? pipeline_->parts() : std::vector<ModelPart>{}));
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
  const ExecutionOrder order =
      pipeline_ ? pipeline_->execution_order() : ExecutionOrder{model_->forward_order(), model_->backward_order()};
  strategy_ = make_strategy(*parallel_plan_, overlap, layout(), order, adamw_settings(config.optimizer), comms, timeline,
                            execution_->exec(), inference);
  if (pipeline_) pipeline_->attach(*strategy_, timeline);
}

Model<float>& ShardedModel::model() { return pipeline_ ? pipeline_->first_model() : *model_; }
const Model<float>& ShardedModel::model() const {
  return pipeline_ ? pipeline_->first_model() : *model_;
}
const ParamLayout& ShardedModel::layout() const { return pipeline_ ? pipeline_->layout() : model_->layout(); }
std::size_t ShardedModel::activation_bytes() const {
  return pipeline_ ? pipeline_->activation_bytes() : model_->activation_bytes();
}

std::vector<float> ShardedModel::whole_params() {
  const std::vector<float> held = strategy_->gather_params();
  if (pipeline_) return pipeline_->whole_params(held);
  return model_->whole_from_slices(held);
}

double ShardedModel::forward_loss(const int* tokens, const int* targets, int B, int T) {
  if (pipeline_) return pipeline_->forward_loss(tokens, targets, B, T);
  return model_->forward(*strategy_, tokens, targets, B, T);
}

ShardedModel::~ShardedModel() = default;

CommStack& ShardedModel::data_comms() { return tensor_ ? *tensor_->data : comms_; }

int ShardedModel::data_rank() const { return tensor_ ? tensor_->data_world->rank() : comms_.world().rank(); }
int ShardedModel::data_ranks() const { return tensor_ ? tensor_->data_world->size() : comms_.world().size(); }

ShardedModel::CommTotals ShardedModel::comm_totals() const {
  CommTotals totals;
  totals.traffic = comms_.traffic();
  totals.waited_seconds = strategy_->comm_wait_seconds();
  if (tensor_) {
    for (const LevelTraffic& more : {tensor_->data->traffic(), tensor_->backend->traffic()}) {
      totals.traffic.intra += more.intra;
      totals.traffic.inter += more.inter;
    }
    totals.tensor_bytes = tensor_->backend->traffic().total();
    totals.waited_seconds += tensor_->group->seconds_in_calls();
  }
  if (pipeline_) {
    const LevelTraffic more = pipeline_->scalar_traffic();
    totals.traffic.intra += more.intra;
    totals.traffic.inter += more.inter;
    totals.pipeline_bytes = pipeline_->bytes_sent();
    totals.waited_seconds += pipeline_->waited_seconds();
  }
  return totals;
}

void ShardedModel::init_params(std::uint64_t seed) {
  std::vector<float> whole(model().whole_layout().total());
  model().init_params(whole, seed);
  load_whole_params(whole);
}

void ShardedModel::load_whole_params(std::span<const float> whole) {
  // Under tensor parallelism the rank keeps its slice, in a pipeline its stage's part; otherwise
  // the whole, without a copy.
  if (pipeline_) strategy_->load_params(pipeline_->stage_values(whole));
  else if (model_->tensor_group().active()) strategy_->load_params(model_->slice_of(whole));
  else strategy_->load_params(whole);
}

double ShardedModel::sum_over_ranks(double value) {
  Exec& exec = execution_->exec();
  double* at = scalar_memory_.as<double>().data();
  exec.upload(at, &value, sizeof value);
  sum_over_ranks_in_place(at);
  exec.download(&value, at, sizeof value);
  if (pipeline_) pipeline_->sum_over_stages(std::span<double>(&value, 1));
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
