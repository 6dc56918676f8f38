#pragma once
// One rank's stage of a pipeline (parallel.pipeline > 1): its ranks, its model chunks and the
// passes between stages. The job's ranks form (pipeline, data, tensor) with the pipeline
// outermost: stage s is the world / P consecutive ranks from s x world / P, and inside it the
// strategy and the tensor groups run as they would over a world of their own. The ranks holding
// the same place in each stage pass activations forward and their gradients back.
//
// A stage holds V model chunks (parallel/pipeline_schedule.hpp; V = 1 without interleaving),
// each a ModelPart, and each chunk one model per micro-batch the schedule keeps in flight
// through it (the activations of each). Their parameters are one layout, the chunks' segments
// one after another, which the stage's strategy shards, reduces and updates as it would a
// whole model's. The first stage and the last both hold the token table (the last for the LM
// head): the last stage's copy is a mirror, its gradient share summed into the first's after
// every step's reduction and updated alike, counted once in the gradient norm and written once.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/agreements.hpp"
#include "comm/group.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/peer_link.hpp"
#include "comm/world.hpp"
#include "core/timeline.hpp"
#include "deck/config.hpp"
#include "exec/exec.hpp"
#include "model/model.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/strategy.hpp"

namespace st {

class PipelineStage {
 public:
  // Splits `world` into the stages; `shape` is the deck's pipeline (deck_pipeline). Collective.
  PipelineStage(const World& world, const PipelineShape& shape, PipelineSchedule schedule, double timeout_seconds);
  ~PipelineStage();
  PipelineStage(const PipelineStage&) = delete;
  PipelineStage& operator=(const PipelineStage&) = delete;

  // The ranks of this stage, as a world of their own (the strategy's and the tensor groups').
  World& stage_world() { return *stage_world_; }
  // The small agreements over every rank of the job, every stage's (a stop signal, the largest
  // rank's memory, a checkpoint's result), which the stage's own CommStack cannot give.
  JobAgreements& job_agreements() { return *job_agreements_; }
  int stage() const { return stage_; }
  const PipelineShape& shape() const { return shape_; }
  PipelineSchedule schedule() const { return schedule_; }

  // Builds the chunks' models (in exec's memory, of up to max_batch sequences) and the stage's
  // layout; `training`: one model per micro-batch the schedule keeps in flight, else one;
  // `bf16_activations`: models with bf16 storage (model/bf16_storage_model.hpp), whose boundary
  // rows pass between the stages in bf16.
  void build_models(const ModelShape& model, int max_batch, Exec& exec, Recompute recompute, TensorGroup tensor,
                    bool training, bool bf16_activations = false);
  // The parts of the model the stage's chunks hold, in chunk order.
  std::vector<ModelPart> parts() const;
  // The chunks' segments one after another: what the strategy holds.
  const ParamLayout& layout() const { return layout_; }
  ExecutionOrder execution_order() const;
  // The segments this rank holds as a mirror of another stage's (StrategyComms::mirrored_segments).
  std::vector<std::size_t> mirrored_segments() const;
  // A model of the stage: chunk 0's first.
  Model<float>& first_model();
  const Model<float>& first_model() const;
  // Activation bytes of every model of the stage.
  std::size_t activation_bytes() const;
  // The stage's share of whole parameters (laid out as the whole model), in layout() order:
  // what the strategy loads.
  std::vector<float> stage_values(std::span<const float> whole) const;

  // The whole model's parameters (laid out as the whole model) on every rank, from `stage`, this
  // stage's (laid out as layout(), gathered from the strategy). Collective over the job.
  std::vector<float> whole_params(std::span<const float> stage) const;

  // The strategy the stage's models read their parameters from (set once it is made), and the
  // timeline the passes are drawn on (may be null): each pass a span on the track "pipeline"
  // ("forward 3", "backward 3"; "... chunk 1" with several chunks), each wait for a neighbour's
  // message one on "pipeline wait", so that the trace shows the schedule and its bubble.
  void attach(Strategy& strategy, Timeline* timeline);
  // On GPUs: activations, their gradients and the stages' sums are device memory, carried
  // between stages through host memory (`exec`'s copies; `staged` wraps a host communicator for
  // device buffers, the execution's device_staging).
  void stage_through_host(Exec& exec, const std::function<std::unique_ptr<Communicator>(Communicator&)>& staged);

  // One training step's passes, in the schedule's order: micro-batch `micro`'s tokens and
  // targets come from fill(micro) (into `tokens` and `targets`, host memory); its loss is added
  // to *loss_sum on the last stage. The strategy is told which backward completes the step.
  // Returns once this stage's passes are done and its messages received.
  void run_passes(std::int64_t micro_batches, int micro_batch, int seq_len, const std::function<void(std::int64_t)>& fill,
                  const int* tokens, const int* targets, double* loss_sum, float loss_scale);
  // A forward pass through every stage (evaluation): the mean loss on the last stage, 0 on the
  // others. Every rank of the pipeline calls it alike.
  double forward_loss(const int* tokens, const int* targets, int B, int T);

  // After the strategy's reduction: the first and the last stage sum their shares of the
  // embeddings' gradient (the tied LM head's); the others do nothing.
  void sum_mirrored_grads(Strategy& strategy, const void* ready);
  // Sums `values` (host doubles) over the stages.
  void sum_over_stages(std::span<double> values);
  // Sums `count` doubles in the execution's memory (a step's scalars) over the stages, after the
  // work `ready` marks (Exec::before_communication).
  void sum_scalars_over_stages(double* values, std::size_t count, const void* ready);
  // Bytes this rank sent to its neighbours, and seconds it waited for theirs.
  std::uint64_t bytes_sent() const { return link_->bytes_sent(); }
  // What the stages' sums sent (the losses and norms, the mirrored embeddings' gradient).
  LevelTraffic scalar_traffic() const;
  double waited_seconds() const { return link_->waited_seconds(); }

 private:
  struct Chunk;
  class ChunkBuffers;
  // The rank of the stage holding virtual stage v, and v's place among that rank's chunks.
  int stage_of(int virtual_stage) const { return virtual_stage % shape_.stages; }
  // A message's tag: the pass, the micro-batch and the virtual stage it goes to.
  int tag(int kind, std::int64_t micro, int to_virtual) const;
  // One chunk's forward of micro-batch `micro` in model `slot`: its input received, its output
  // sent on. With loss_sum, training's (the loss added there); without, the mean loss returned
  // (0 but on the last stage).
  double forward_chunk(Chunk& chunk, int slot, std::int64_t micro, int kind, const int* tokens, const int* targets,
                       int B, int T, double* loss_sum);

  PipelineShape shape_;
  PipelineSchedule schedule_;
  int stage_ = 0;
  OwnedComm stage_comm_, across_comm_, ends_comm_;
  std::unique_ptr<World> stage_world_;
  std::unique_ptr<PeerLink> link_;
  std::unique_ptr<MpiCommunicator> across_, ends_;  // the stages' scalars; the first and last stage's embeddings
  std::unique_ptr<Communicator> across_device_, ends_device_;  // the same on device buffers (GPUs)
  std::unique_ptr<JobAgreements> job_agreements_;   // over every rank of the job
  std::vector<Chunk> chunks_;
  ParamLayout layout_;
  ModelShape model_shape_;
  Strategy* strategy_ = nullptr;
  Timeline* timeline_ = nullptr;
  // A pass's name on the timeline.
  std::string pass_name(const char* pass, std::int64_t micro, int chunk) const;
};

}  // namespace st
