#include "train/pipeline_stage.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "model/bf16_storage_model.hpp"

namespace st {

namespace {

// What a message carries: a training forward's activations, their gradient, an evaluation's.
constexpr int kForward = 0, kBackward = 1, kEvaluation = 2;

// A stage's ranks as a world of their own: the nodes the job's world has (emulated ones
// included, cut to the stage where a node holds several stages).
std::unique_ptr<World> make_stage_world(const World& world, MPI_Comm stage_comm, int stage_size) {
  if (!world.emulated()) return std::make_unique<World>(stage_comm);
  const int per_node = world.local_size();
  if (stage_size % per_node != 0 && per_node % stage_size != 0)
    throw Error("a pipeline stage of " + std::to_string(stage_size) + " ranks and nodes of " + std::to_string(per_node) +
                    " (SHARDTRAIN_RANKS_PER_NODE): one must divide the other",
                ErrorScope::all_ranks);
  return std::make_unique<World>(stage_comm, std::min(per_node, stage_size));
}

}  // namespace

struct PipelineStage::Chunk {
  int virtual_stage = 0;
  ModelPart part;
  std::size_t first_segment = 0;  // in the stage's layout
  std::vector<std::unique_ptr<Model<float>>> slots;  // one per micro-batch in flight
  std::unique_ptr<ChunkBuffers> buffers;
};

// A chunk's segments as its models number them (0 ..), found in the stage's strategy, whose
// layout holds every chunk's one after another.
class PipelineStage::ChunkBuffers final : public SegmentBuffers<float> {
 public:
  ChunkBuffers(Strategy& strategy, std::size_t first) : strategy_(strategy), first_(first) {}
  const float* params(std::size_t s) override { return strategy_.params(first_ + s); }
  const Bf16* bf16_params(std::size_t s) override { return strategy_.bf16_params(first_ + s); }
  float* grads(std::size_t s) override { return strategy_.grads(first_ + s); }
  void before_forward(std::size_t s) override { strategy_.before_forward(first_ + s); }
  void after_forward(std::size_t s) override { strategy_.after_forward(first_ + s); }
  void before_backward(std::size_t s) override { strategy_.before_backward(first_ + s); }
  void grad_ready(std::size_t s) override { strategy_.grad_ready(first_ + s); }

 private:
  Strategy& strategy_;
  std::size_t first_;
};

PipelineStage::PipelineStage(const World& world, const PipelineShape& shape, PipelineSchedule schedule,
                             double timeout_seconds)
    : shape_(shape), schedule_(schedule) {
  ST_REQUIRE(shape.stages > 1 && world.size() % shape.stages == 0, "a pipeline's stages must divide the world");
  const int stage_size = world.size() / shape.stages;
  stage_ = world.rank() / stage_size;
  stage_comm_ = split_group(world.comm(), stage_, world.rank());
  stage_world_ = make_stage_world(world, stage_comm_.get(), stage_size);
  // The ranks holding this rank's place in every stage, in stage order.
  across_comm_ = split_group(world.comm(), world.rank() % stage_size, world.rank());
  link_ = std::make_unique<PeerLink>(across_comm_.get(), timeout_seconds);
  // Stages span nodes where the job has several (the pipeline is the outermost dimension).
  const TrafficLevel level = world.node_count() > 1 ? TrafficLevel::inter : TrafficLevel::intra;
  across_ = std::make_unique<MpiCommunicator>(across_comm_.get(), level, MpiWait::polling);
  const bool end = stage_ == 0 || stage_ == shape.stages - 1;
  ends_comm_ = split_group(across_comm_.get(), end ? 0 : 1, stage_);
  if (end) ends_ = std::make_unique<MpiCommunicator>(ends_comm_.get(), level, MpiWait::polling);
  job_agreements_ = std::make_unique<JobAgreements>(world.comm(), timeout_seconds);
}

PipelineStage::~PipelineStage() = default;

void PipelineStage::build_models(const ModelShape& model, int max_batch, Exec& exec, Recompute recompute,
                                 TensorGroup tensor, bool training, bool bf16_activations) {
  model_shape_ = model;
  const std::vector<ModelPart> parts = pipeline_stage_parts(model, shape_, stage_);
  for (int c = 0; c < shape_.virtual_stages; ++c) {
    Chunk chunk;
    chunk.virtual_stage = c * shape_.stages + stage_;
    chunk.part = parts[static_cast<std::size_t>(c)];
    chunk.first_segment = layout_.segments().size();
    // The micro-batches the schedule keeps in flight through this chunk: a model (its
    // activations) for each.
    const int slots = training ? std::max(1, pipeline_chunk_in_flight(schedule_, shape_, stage_, c)) : 1;
    for (int k = 0; k < slots; ++k)
      chunk.slots.push_back(make_stored_model(model, max_batch, exec, recompute, tensor, chunk.part, bf16_activations));
    for (const Segment& segment : chunk.slots.front()->layout().segments()) {
      std::vector<TensorSpec> tensors;
      for (const TensorSlot& t : segment.tensors) tensors.push_back({t.name, t.shape, t.role, t.split, t.parts});
      layout_.add_segment(segment.name, tensors);
    }
    chunks_.push_back(std::move(chunk));
  }
}

std::vector<ModelPart> PipelineStage::parts() const {
  std::vector<ModelPart> parts;
  for (const Chunk& chunk : chunks_) parts.push_back(chunk.part);
  return parts;
}

Model<float>& PipelineStage::first_model() { return *chunks_.front().slots.front(); }
const Model<float>& PipelineStage::first_model() const { return *chunks_.front().slots.front(); }

ExecutionOrder PipelineStage::execution_order() const {
  ExecutionOrder order;
  for (const Chunk& chunk : chunks_) {
    const Model<float>& m = *chunk.slots.front();
    for (const std::size_t s : m.forward_order()) order.forward.push_back(chunk.first_segment + s);
  }
  for (auto chunk = chunks_.rbegin(); chunk != chunks_.rend(); ++chunk)
    for (const std::size_t s : chunk->slots.front()->backward_order()) order.backward.push_back(chunk->first_segment + s);
  return order;
}

std::vector<std::size_t> PipelineStage::mirrored_segments() const {
  // The last stage's last chunk ends the model and holds the embeddings' segment, first of its own.
  if (stage_ != shape_.stages - 1) return {};
  return {chunks_.back().first_segment};
}

std::size_t PipelineStage::activation_bytes() const {
  std::size_t bytes = 0;
  for (const Chunk& chunk : chunks_)
    for (const auto& m : chunk.slots) bytes += m->activation_bytes();
  return bytes;
}

std::vector<float> PipelineStage::stage_values(std::span<const float> whole) const {
  std::vector<float> values;
  values.reserve(layout_.total());
  for (const Chunk& chunk : chunks_) {
    const std::vector<float> part = chunk.slots.front()->slice_of(whole);
    values.insert(values.end(), part.begin(), part.end());
  }
  return values;
}

std::vector<float> PipelineStage::whole_params(std::span<const float> stage) const {
  ST_REQUIRE(stage.size() == layout_.total(), "a stage's parameters do not match its layout");
  const Model<float>& any = *chunks_.front().slots.front();
  const ParamLayout& whole_layout = any.whole_layout();
  // Each stage places its chunks' tensors (whole: the tensor groups gather their slices) in a
  // buffer of zeros, the mirror left out; the sum over the stages is the whole model.
  std::vector<float> whole(whole_layout.total(), 0.0f);
  for (const Chunk& chunk : chunks_) {
    const Model<float>& model = *chunk.slots.front();
    const std::size_t first = layout_.segments()[chunk.first_segment].offset;
    const std::vector<float> part =
        model.whole_from_slices(stage.subspan(first, model.layout().total()));
    const ParamLayout part_layout = make_layout(model_shape_, {}, chunk.part);
    const bool mirror = stage_ == shape_.stages - 1 && &chunk == &chunks_.back();
    for (std::size_t s = mirror ? 1 : 0; s < part_layout.segments().size(); ++s)
      for (const TensorSlot& t : part_layout.segments()[s].tensors)
        std::copy_n(part.begin() + static_cast<std::ptrdiff_t>(t.offset), t.size,
                    whole.begin() + static_cast<std::ptrdiff_t>(whole_layout.tensor(t.name).offset));
  }
  across_->all_reduce(std::span<float>(whole), ReduceOp::sum);
  return whole;
}

void PipelineStage::attach(Strategy& strategy, Timeline* timeline) {
  strategy_ = &strategy;
  timeline_ = timeline;
  for (Chunk& chunk : chunks_) chunk.buffers = std::make_unique<ChunkBuffers>(strategy, chunk.first_segment);
}

void PipelineStage::stage_through_host(Exec& exec,
                                       const std::function<std::unique_ptr<Communicator>(Communicator&)>& staged) {
  link_->stage_through({[&exec](void* host, const void* from, std::size_t bytes) { exec.download(host, from, bytes); },
                        [&exec](void* to, const void* host, std::size_t bytes) { exec.upload(to, host, bytes); }});
  across_device_ = staged(*across_);
  if (ends_) ends_device_ = staged(*ends_);
}

std::string PipelineStage::pass_name(const char* pass, std::int64_t micro, int chunk) const {
  std::string name = pass;
  name += ' ';
  name += std::to_string(micro);
  if (shape_.virtual_stages > 1) {
    name += " chunk ";
    name += std::to_string(chunk);
  }
  return name;
}

int PipelineStage::tag(int kind, std::int64_t micro, int to_virtual) const {
  // Messages between two ranks with one tag arrive in the order they were sent (MPI's
  // non-overtaking rule), and every schedule sends and receives the passes into one virtual
  // stage in micro-batch order: the micro-batch's number wraps within MPI's smallest tag bound
  // (32767, whatever the virtual stages).
  const std::int64_t wrap = std::max<std::int64_t>(1, 32767 / (3 * shape_.chunks()));
  return static_cast<int>(((micro % wrap) * shape_.chunks() + to_virtual) * 3 + kind);
}

double PipelineStage::forward_chunk(Chunk& chunk, int slot, std::int64_t micro, int kind, const int* tokens,
                                    const int* targets, int B, int T, double* loss_sum) {
  Model<float>& model = *chunk.slots[static_cast<std::size_t>(slot)];
  const int v = chunk.virtual_stage;
  const std::size_t n = model.part_boundary_elements(B, T);
  if (v > 0) {
    Timeline::Span wait(timeline_, "pipeline wait", "input of " + pass_name("forward", micro, chunk.virtual_stage / shape_.stages));
    link_->receive(stage_of(v - 1), tag(kind, micro, v), model.part_input(n));
  }
  Timeline::Span span(timeline_, "pipeline", pass_name(kind == kEvaluation ? "evaluation" : "forward", micro,
                                                       chunk.virtual_stage / shape_.stages));
  double mean = 0;
  if (loss_sum) model.forward_into(*chunk.buffers, tokens, targets, B, T, loss_sum);
  else mean = model.forward(*chunk.buffers, tokens, targets, B, T);
  if (v + 1 < shape_.chunks()) link_->send(stage_of(v + 1), tag(kind, micro, v + 1), model.part_output(n));
  return mean;
}

void PipelineStage::run_passes(std::int64_t micro_batches, int micro_batch, int seq_len,
                               const std::function<void(std::int64_t)>& fill, const int* tokens, const int* targets,
                               double* loss_sum, float loss_scale) {
  ST_REQUIRE(micro_batches == shape_.micro_batches, "a step of another number of micro-batches than the pipeline's");
  for (const PipelineAction& a : pipeline_actions(schedule_, shape_, stage_)) {
    Chunk& chunk = chunks_[static_cast<std::size_t>(a.chunk)];
    const int slot = static_cast<int>(a.micro % static_cast<std::int64_t>(chunk.slots.size()));
    if (a.pass == PipelineAction::Pass::forward) {
      fill(a.micro);
      forward_chunk(chunk, slot, a.micro, kForward, tokens, targets, micro_batch, seq_len, loss_sum);
      continue;
    }
    Model<float>& model = *chunk.slots[static_cast<std::size_t>(slot)];
    const int v = chunk.virtual_stage;
    const std::size_t n = model.part_boundary_elements(micro_batch, seq_len);
    // The backward that completes the chunk's gradients starts the strategy's reductions.
    strategy_->begin_micro_batch(a.micro + 1 == micro_batches);
    if (v + 1 < shape_.chunks()) {
      Timeline::Span wait(timeline_, "pipeline wait", "gradient of " + pass_name("backward", a.micro, a.chunk));
      link_->receive(stage_of(v + 1), tag(kBackward, a.micro, v), model.part_grad(n));
    }
    Timeline::Span span(timeline_, "pipeline", pass_name("backward", a.micro, a.chunk));
    model.backward(*chunk.buffers, loss_scale);
    if (v > 0) link_->send(stage_of(v - 1), tag(kBackward, a.micro, v - 1), model.part_grad(n));
  }
  link_->drain();
}

double PipelineStage::forward_loss(const int* tokens, const int* targets, int B, int T) {
  double mean = 0;
  for (Chunk& chunk : chunks_) mean += forward_chunk(chunk, 0, 0, kEvaluation, tokens, targets, B, T, nullptr);
  link_->drain();
  return mean;
}

void PipelineStage::sum_mirrored_grads(Strategy& strategy, const void* ready) {
  if (!ends_) return;
  Buffer share = strategy.reduced_grads(stage_ == 0 ? 0 : chunks_.back().first_segment);
  share.ready = ready;
  Communicator& ends = ends_device_ ? *ends_device_ : static_cast<Communicator&>(*ends_);
  ends.all_reduce(share, ReduceOp::sum);
}

LevelTraffic PipelineStage::scalar_traffic() const {
  LevelTraffic t = across_->traffic();
  if (ends_) {
    const LevelTraffic more = ends_->traffic();
    t.intra += more.intra;
    t.inter += more.inter;
  }
  return t;
}

void PipelineStage::sum_over_stages(std::span<double> values) { across_->all_reduce(values, ReduceOp::sum); }

void PipelineStage::sum_scalars_over_stages(double* values, std::size_t count, const void* ready) {
  Communicator& across = across_device_ ? *across_device_ : static_cast<Communicator&>(*across_);
  across.all_reduce(Buffer::of(std::span<double>(values, count), ready), ReduceOp::sum);
}

}  // namespace st
