#pragma once
// The model on this job's ranks: where each rank computes (its execution backend), the
// communicators over the ranks, the GPT-2 with its activations, and the parallel strategy that
// shards its parameters, gradients and optimizer state as the deck says. What training,
// evaluation and generation share; the training loop (trainer.hpp) adds data, the schedule,
// checkpoints and the logs.
#include <cstdint>
#include <memory>

#include "comm/stack.hpp"
#include "comm/world.hpp"
#include "core/timeline.hpp"
#include "deck/config.hpp"
#include "model/deck_shape.hpp"
#include "model/model.hpp"
#include "parallel/deck_plan.hpp"
#include "parallel/plan.hpp"
#include "parallel/strategy.hpp"
#include "runtime/make_exec.hpp"
#include "train/pipeline_stage.hpp"

namespace st {

class ShardedModel {
 public:
  // training: as the deck says. inference (generate, eval): forward passes only, so no
  // gradients or optimizer state, and the activations of model.recompute = "full", which
  // costs nothing without a backward pass.
  enum class Use { training, inference };
  // `execution`: this rank's backend (make_execution); forward passes of up to `max_batch`
  // sequences; collectives and compute spans go to `timeline` (may be null). Throws Error (all
  // ranks) for an hsdp group the job cannot form.
  ShardedModel(const Config& config, World& world, std::unique_ptr<Execution> execution, int max_batch,
               Timeline* timeline, Use use = Use::training);
  ~ShardedModel();
  ShardedModel(const ShardedModel&) = delete;
  ShardedModel& operator=(const ShardedModel&) = delete;

  // The rank's model: under pipeline parallelism its stage's first (pipeline()).
  Model<float>& model();
  const Model<float>& model() const;
  // What the strategy holds (the model's layout; a pipeline stage's chunks' one after another).
  const ParamLayout& layout() const;
  // The activations of every model of the rank (a pipeline stage keeps one per micro-batch in flight).
  std::size_t activation_bytes() const;
  // Pipeline parallelism (parallel.pipeline > 1, in training): this rank's stage; null without.
  PipelineStage* pipeline() { return pipeline_.get(); }
  const PipelineStage* pipeline() const { return pipeline_.get(); }
  // The whole model's fp32 parameters on every rank, gathered from the shards, a tensor group's
  // slices and a pipeline's stages. Collective.
  std::vector<float> whole_params();
  // A forward pass with targets (evaluation): the mean loss, through every stage of a pipeline
  // (0 on the stages before the last). Every rank calls it alike.
  double forward_loss(const int* tokens, const int* targets, int B, int T);
  Strategy& strategy() { return *strategy_; }
  const Strategy& strategy() const { return *strategy_; }
  const Execution& execution() const { return *execution_; }
  CommStack& comms() { return comms_; }
  const CommStack& comms() const { return comms_; }
  // The small agreements over every rank of the job (comms() is a pipeline stage's ranks only).
  JobAgreements& agreements() { return pipeline_ ? pipeline_->job_agreements() : comms_.agreements(); }
  // What the strategy shards and sends, made once from the deck, the layout and the world.
  const ParallelPlan& parallel_plan() const { return *parallel_plan_; }
  // Ranks the strategy splits the model over (hsdp: its group; the others: the data-parallel
  // ranks).
  int shard_group() const { return parallel_plan_->mesh().shards; }
  // The data-parallel ranks: under tensor parallelism (parallel.tensor > 1) those holding the
  // same slice of the layers, one per tensor group, which split the batch between them; without
  // it, the world. This rank's place among them and their number.
  int data_rank() const;
  int data_ranks() const;
  // What this rank's communication came to so far; a step's is the difference across it.
  struct CommTotals {
    // Every byte this job's communicators sent, by level: the world's, and under tensor
    // parallelism the data-parallel ranks' and the tensor group's.
    LevelTraffic traffic;
    // Of those, the tensor group's (inside a node: part of traffic.intra); 0 without a group.
    std::uint64_t tensor_bytes = 0;
    // Activations and their gradients sent to the neighbouring pipeline stages (not in traffic:
    // point to point, not collectives).
    std::uint64_t pipeline_bytes = 0;
    // Seconds the training thread waited for communication: the strategy's waits, and the
    // tensor group's collectives, which block it.
    double waited_seconds = 0;
  };
  CommTotals comm_totals() const;

  // Every rank initialises the whole model from the same seed and keeps its part (its slice of
  // it under tensor parallelism), so all start from the same parameters without a broadcast.
  void init_params(std::uint64_t seed);
  // Loads whole parameters (laid out as the whole model, e.g. from a weights file) into the
  // strategy: this rank's slice of them under tensor parallelism.
  void load_whole_params(std::span<const float> whole);
  // Collective: the sum of every rank's value over the data-parallel ranks and a pipeline's
  // stages (through the backend's memory: on GPUs the job's collectives reduce device buffers
  // only).
  double sum_over_ranks(double value);
  // The same in place, on a double in the backend's memory: queued, no host wait (nothing on one
  // data-parallel rank).
  void sum_over_ranks_in_place(double* value);
  // A training step's scalars, in the backend's memory (exec/step_scalars.hpp, train/train_step.hpp).
  StepScalars* step_scalars() { return scalar_memory_.as<StepScalars>().data(); }

 private:
  // Under tensor parallelism: the tensor group's communicator and the data-parallel world with
  // its communicators, beneath the strategy.
  struct TensorRanks;
  CommStack& data_comms();

  std::unique_ptr<Execution> execution_;  // before the communicators, which call into it
  std::unique_ptr<PipelineStage> pipeline_;  // before the communicators: its ranks are theirs
  CommStack comms_;
  std::unique_ptr<TensorRanks> tensor_;
  std::unique_ptr<Model<float>> model_;
  std::unique_ptr<ParallelPlan> parallel_plan_;
  std::unique_ptr<Strategy> strategy_;
  Memory scalar_memory_;  // in the backend's space: a step's scalars, or one value summed over ranks
};

// "; tensor parallel: each layer split over T consecutive ranks (D data-parallel rank(s) per
// slice)" for the settings tables of run and check; "" without tensor parallelism.
std::string tensor_split_note(int degree, int data_ranks);

}  // namespace st
