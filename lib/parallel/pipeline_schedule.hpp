#pragma once
// A pipelined step as a value: which pass of which micro-batch each stage runs, in what order,
// computed once from the schedule and the pipeline's shape. The step executes it (one list per
// rank), the plan counts the activations it keeps in flight, the planner times its bubble and
// the trace draws it; none of them orders passes on its own.
//
// The model's blocks are cut into P x V consecutive pieces, the virtual stages. Rank (stage) s
// holds V of them, its chunks: chunk c is virtual stage c P + s (Megatron's round robin), so a
// micro-batch visits every rank V times. Without interleaving V = 1 and a chunk is a stage.
//
//   gpipe        every micro-batch's forward, then every backward: simple, but all m
//                micro-batches' activations are kept at once;
//   1f1b         PipeDream-Flush: P - s - 1 forwards to fill the pipe, then one forward, one
//                backward, then the remaining backwards; at most P - s micro-batches in flight;
//   interleaved  Megatron's 1F1B over V chunks per rank: the bubble shrinks V times for
//                (V - 1) P more micro-batch chunks in flight and V times more messages.
// All three idle (P - 1) / (m V) of the ideal step time (the bubble) when every chunk's
// passes take the same time.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/choices.hpp"
#include "model/layout.hpp"

namespace st {

struct PipelineShape {
  PipelineShape() = default;
  PipelineShape(int stages_, int micro_batches_, int virtual_stages_ = 1, std::vector<std::int64_t> blocks_ = {})
      : stages(stages_), micro_batches(micro_batches_), virtual_stages(virtual_stages_), blocks(std::move(blocks_)) {}
  int stages = 1;          // P: ranks along the pipeline
  int micro_batches = 1;   // m: per step, through each stage
  int virtual_stages = 1;  // V: model chunks per rank (interleaved only)
  // Blocks of each of the P x V chunks along the model (parallel.stage_blocks); empty: balanced
  // by FLOPs (pipeline_parts).
  std::vector<std::int64_t> blocks;
  int chunks() const { return stages * virtual_stages; }
};

struct PipelineAction {
  enum class Pass { forward, backward };
  Pass pass = Pass::forward;
  int micro = 0;  // the micro-batch, 0 .. m - 1
  int chunk = 0;  // the rank's model chunk, 0 .. V - 1
  // The virtual stage it runs on stage s: the chunk's place along the whole model.
  int virtual_stage(const PipelineShape& shape, int stage) const { return chunk * shape.stages + stage; }
  bool operator==(const PipelineAction&) const = default;
};

// Why the schedule cannot run this shape ("" when it can), naming the deck's keys: gpipe and
// 1f1b take one chunk per rank; interleaved takes two or more and, as Megatron's, a number of
// micro-batches that is a multiple of the stages.
std::string pipeline_schedule_problem(PipelineSchedule schedule, const PipelineShape& shape);

// Stage `stage`'s passes in the order it runs them: each micro-batch's forward and backward
// through each of its chunks, once. Throws Error where pipeline_schedule_problem is not "".
std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, const PipelineShape& shape, int stage);

// The schedule run with every forward of a chunk taking `forward` and every backward `backward`
// (seconds or any unit) and messages taking no time: when each stage finishes, and the most
// micro-batch chunks whose activations a stage keeps at once (forwards done whose backward is
// not). Throws Error if the stages' lists wait on each other in a cycle (they never do for the
// schedules above; the check guards the executor's order against a change here).
struct PipelineTiming {
  double makespan = 0;             // the last stage to finish
  std::vector<int> peak_in_flight;  // per stage
};
PipelineTiming simulate_pipeline(PipelineSchedule schedule, const PipelineShape& shape, double forward,
                                 double backward);

// The model's blocks cut into `chunks` (P x V) parts of consecutive blocks, in order along the
// model (virtual stage v is the v-th): `blocks` of each where given, else balanced by training
// FLOPs, the LM head's counted with the last part's blocks: the largest part's FLOPs as small as
// they go, then the parts as even as they go, earlier parts taking the extra blocks. Where the
// head is light that is n_layer / chunks blocks each, the first n_layer mod chunks one more.
// Throws Error when there are fewer blocks than parts (or `blocks` does not fit:
// stage_blocks_problem).
std::vector<ModelPart> pipeline_parts(const ModelShape& shape, int chunks, const std::vector<std::int64_t>& blocks = {});
// Blocks of each of most.size() parts as pipeline_parts balances them, but with part k taking at
// most most[k] blocks (what its ranks' memory holds: the planner's memory-balanced cut) and at
// least `least`. Empty where no cut keeps within them (the caps add up to fewer than n_layer
// blocks, or a cap is below `least`).
std::vector<std::int64_t> capped_balanced_blocks(const ModelShape& shape, const std::vector<std::int64_t>& most,
                                                 std::int64_t least = 1);
// parallel.stage_blocks for an interleaved pipeline whose stage s holds stage_totals[s] blocks:
// its V chunks share them evenly, the earlier chunks taking the extra; chunk c of stage s is the
// (c x P + s)-th along the model.
std::vector<std::int64_t> chunk_blocks(const std::vector<std::int64_t>& stage_totals, int virtual_stages);
// What is wrong with parallel.stage_blocks for `chunks` parts of the shape's model ("" if
// nothing, or if it is empty).
std::string stage_blocks_problem(const ModelShape& shape, int chunks, const std::vector<std::int64_t>& blocks);

// The parts a stage holds, its chunks' in order: chunk c is virtual stage c x P + stage.
std::vector<ModelPart> pipeline_stage_parts(const ModelShape& shape, const PipelineShape& pipeline, int stage);
// The same from the pipeline's parts already cut (pipeline_parts).
std::vector<ModelPart> pipeline_stage_parts(const std::vector<ModelPart>& parts, const PipelineShape& pipeline, int stage);

// (P - 1) / (m V): the time the pipeline idles, as a fraction of the step's work per stage.
double pipeline_bubble(const PipelineShape& shape);

// The most micro-batch chunks a stage keeps activations for at once under the schedule (stage 0
// keeps the most): gpipe m; 1f1b min(P, m); interleaved Megatron's warm-up plus one.
int pipeline_peak_in_flight(PipelineSchedule schedule, const PipelineShape& shape, int stage);
// The most micro-batches in flight at once through one chunk of a stage (0 .. V - 1): the models
// (sets of activations) that chunk needs. Without interleaving, pipeline_peak_in_flight.
int pipeline_chunk_in_flight(PipelineSchedule schedule, const PipelineShape& shape, int stage, int chunk);

}  // namespace st
