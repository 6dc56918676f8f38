#pragma once
// From the deck to the parallel plan: the one place the deck's parallel settings (and the
// planner's variations of them) become a mesh and a ParallelPlan. The run (ShardedModel), `check`
// and the planner all make their plan here, so what they predict is what the run makes.
#include <cstdint>
#include <string>
#include <vector>

#include "deck/config.hpp"
#include "model/activations.hpp"
#include "model/layout.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/plan.hpp"

namespace st {

// The ranks splitting each layer (parallel.tensor), checked against the world and the model:
// returns it, or throws Error (all ranks) naming parallel.tensor and what it must divide.
int deck_tensor_degree(const Config& config, int world_size, int node_size, bool uniform_nodes);
// The ranks the batch is split between: world_size / (parallel.pipeline x parallel.tensor) (a
// tensor group's ranks share their part of it, and a micro-batch goes through every stage), at
// least 1 (where those do not divide the world, deck_tensor_degree and deck_pipeline say so).
int deck_data_ranks(const Config& config, int world_size);

// The pipeline's stages (parallel.pipeline), checked against the world, the model and the
// schedule (pipeline_schedule_problem, with `micro_batches` per step through each stage):
// returns the pipeline's shape, or throws Error (all ranks) naming the key and what it must be.
PipelineShape deck_pipeline(const Config& config, int world_size, std::int64_t micro_batches);
// The deck's pipeline shape unchecked (stages, chunks, stage_blocks from the deck) with
// `micro_batches` per step: for plans of a deck already checked, or of the planner's variations.
PipelineShape deck_pipeline_shape(const Config& config, std::int64_t micro_batches);
// "; pipeline: 2 stages (blocks 0-1, 2-3), 1f1b, ..." for the settings tables of run and check
// ("2 stages x 2 chunks (blocks 0 + 2; 1 + 3), interleaved, ..." with chunks): the stages'
// blocks, the schedule, the micro-batches in flight on the first stage, the bubble and the bytes
// the first stage sends per step (to each neighbouring stage without chunks); "" without a
// pipeline.
std::string pipeline_note(const Config& config, std::int64_t micro_batches, std::int64_t micro_batch);
// The bytes of one message between neighbouring stages: a micro-batch of `micro_batch` sequences'
// residual stream (or its gradient), value_bytes a value (4, or 2 with bf16 activations:
// activation_value_bytes), as one rank of a tensor group of `tensor` sends it (its share of the
// rows under sequence parallelism, all of them otherwise).
std::uint64_t pipeline_message_bytes(const ModelShape& shape, std::int64_t micro_batch, int tensor,
                                     bool sequence_parallel, std::size_t value_bytes);

// Its first checks, which need no batch: the stages (times parallel.tensor) divide the world, the
// model has a block for each chunk, parallel.stage_blocks (if set) cuts the model into the chunks,
// and chunks go with the interleaved schedule. Throws Error (all ranks) naming the key.
void deck_pipeline_degree(const Config& config, int world_size);

// The deck's mesh on world_size ranks of node_size per node (make_mesh: hsdp's group is
// parallel.shard_group, or the node's ranks); throws Error (all ranks) naming the key if it does
// not divide the world.
Mesh deck_mesh(const Config& config, int world_size, int node_size);

// What a plan is made from besides the model and the job: the deck's parallel settings
// (deck_choice), or the planner's variations of them.
struct ParallelChoice {
  StrategyKind strategy = StrategyKind::ddp;
  std::int64_t shard_group = 0;           // hsdp's group (parallel.shard_group; 0: the node's ranks)
  int tensor = 1;                         // ranks splitting each layer (parallel.tensor)
  Recompute recompute = Recompute::none;  // model.recompute: "full" repeats the tensor group's sums
  // parallel.grad_reduction. "auto" is settled against the rank's memory (plan/fit) before a run
  // builds its strategy; a plan made from it before then, or where no gradients are reduced
  // (eval, generate, checkpoints), reduces once.
  GradReduction grad_reduction = GradReduction::step;
};
ParallelChoice deck_choice(const Config& config);

// The parallel plan of `choice` for `layout` (this rank's: under tensor parallelism its slice) on
// a job of world_size ranks, node_size per node, with micro_batches per optimizer step of
// micro_batch sequences each: the mesh (the data-parallel ranks are world_size / choice.tensor)
// and what the run sends. The deck's other parallel keys (precision, bucket_mb,
// sequence_parallel) are the deck's. Under a pipeline `layout` is a stage's, its chunks' segments
// one after another, and `parts` the chunks' parts of the model (none: the whole model).
ParallelPlan choice_plan(const Config& config, const ParallelChoice& choice, const ParamLayout& layout, int world_size,
                         int node_size, std::int64_t micro_batches, std::int64_t micro_batch,
                         const std::vector<ModelPart>& parts = {});
// The deck's parallel plan: choice_plan of deck_choice. What the run makes and what check and
// the planner predict from.
ParallelPlan deck_plan(const Config& config, const ParamLayout& layout, int world_size, int node_size,
                       std::int64_t micro_batches, std::int64_t micro_batch, const std::vector<ModelPart>& parts = {});

}  // namespace st
