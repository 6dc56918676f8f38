#pragma once
// The planner: for a deck and a machine, what each strategy would hold per rank and how long a
// step would take, which of them fit, and which to run and why.
//
// Memory is the strategies' own arithmetic (the parallel plan, parallel/plan.hpp: the ZeRO
// table over the sharded layout) plus the model's activations and an estimate of the workspace. Step time is compute
// (the model's training FLOPs at the machine's rate) plus what communication is not hidden
// behind compute, each level of links (fast group, node, network) at its bandwidth with a
// latency per collective call, plus the optimizer's sweep over what the rank updates.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "deck/config.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "model/activations.hpp"
#include "plan/machine.hpp"

namespace st {

struct StrategyPrediction {
  StrategyKind strategy = StrategyKind::ddp;
  int group = 0;  // ranks that shard together (hsdp: the group; others: the data-parallel ranks)
  int tensor = 1;  // ranks splitting each layer (parallel.tensor)
  int pipeline = 1;  // stages of consecutive blocks (parallel.pipeline); the strategy runs within a stage
  int virtual_stages = 1;  // model chunks per stage (parallel.virtual_stages, interleaved)
  // Under a pipeline the deck cuts by FLOPs (parallel.stage_blocks = []): the blocks of each stage
  // where that cut overfills a stage's ranks and the planner cuts by memory instead (fewer blocks
  // on the fullest stages, the FLOPs as even as that allows); else empty.
  std::vector<std::int64_t> stage_blocks;
  Recompute recompute = Recompute::none;
  // parallel.grad_reduction as predicted (auto: once where the whole gradient fits, else every
  // micro-batch), and whether it reduce-scatters every micro-batch (sharded gradients, several
  // micro-batches a step).
  GradReduction grad_reduction = GradReduction::step;
  bool reduces_each_micro_batch = false;
  std::uint64_t state_bytes = 0, activation_bytes = 0, workspace_bytes = 0;
  // Of workspace_bytes, on a GPU rank: what its kernels hold beside the accounted buffers
  // (cuBLAS's and cuBLASLt's workspaces, bf16 operand copies, gradient chunk sums, the token
  // sort; exec/kernel_scratch.hpp). On CPU ranks 0, but with bf16 activations the host
  // reference's widening slots (host_bf16_slots).
  std::uint64_t kernel_scratch_bytes = 0;
  std::uint64_t total_bytes() const { return state_bytes + activation_bytes + workspace_bytes; }
  bool fits = true;
  double compute_s = 0, comm_s = 0, exposed_s = 0, optimizer_s = 0, step_s = 0;
  double recompute_s = 0;  // of compute_s: what activation recomputation adds
  std::uint64_t fast_bytes = 0;  // sent per rank per step inside the fastest level used
  std::uint64_t slow_bytes = 0;  // ... across the slowest level crossed (between groups or nodes)
  std::string slow_level;        // its name ("" when nothing crosses a slower level)
  std::uint64_t tensor_bytes = 0;  // sent per rank per step within the tensor group (its activations)
  double tensor_s = 0;             // of comm_s and exposed_s: the tensor group's exchanges, never hidden
  // Under a pipeline: what the busiest rank sends its neighbouring stages per step (activations
  // forward, their gradients back), over which link, in how long (of comm_s; the part not hidden
  // behind the stage's compute is in exposed_s), and the bubble (of compute_s: the stage idling
  // while the pipeline fills and drains).
  std::uint64_t pipeline_bytes = 0;
  std::string pipeline_level;
  double pipeline_s = 0, pipeline_exposed_s = 0, bubble_s = 0;
};

struct PlanResult {
  std::vector<StrategyPrediction> rows;  // those that fit, fastest first; then the rest, smallest first
  int chosen = -1;                       // index into rows; -1 when nothing fits
  std::optional<Recompute> recompute;    // the recomputation the choice needs, when the deck's does not fit
  std::string reason;                    // the choice and its trade-off, in words
  std::vector<std::string> notes;
};

// One strategy on the machine. `group`: hsdp's sharding group, in data-parallel ranks (ignored by
// the others); `recompute`: the activation recomputation (model.recompute when not given);
// `tensor`: ranks splitting each layer (consecutive, inside a node), the strategy running over the
// world / tensor ranks holding the same slice. parallel.grad_reduction = "auto" is predicted
// once a step where that fits, else every micro-batch.
// How a pipeline's stages are cut for a prediction: as the deck says (parallel.stage_blocks, or by
// FLOPs where it is empty: what the run does, and what `check` predicts), or, where that
// overfills a stage and the deck leaves the cut to the run, by memory (the planner's rows, with
// the cut in stage_blocks for the deck).
enum class PipelineCut { deck, memory_where_needed };
// "[11, 13, 13, 11]": a pipeline's cut as the deck writes parallel.stage_blocks.
std::string stage_blocks_text(const std::vector<std::int64_t>& blocks);
StrategyPrediction predict_strategy(const Config& config, const Machine& machine, StrategyKind strategy,
                                    int group, std::optional<Recompute> recompute = std::nullopt, int tensor = 1,
                                    PipelineCut cut = PipelineCut::deck);
// Whether the run's attention would be flash attention on this machine (GPUs, precision bf16,
// parallel.attention "auto", a head width with kernels: exec/attention_probs.hpp), which keeps
// no T x T probabilities.
bool plans_flash_attention(const Config& config, const Machine& machine);
// Whether the run's ranks keep their logits in bf16 (the fused classifier,
// LayerKernels::fused_classifier): GPUs in bf16, parallel.classifier "auto".
bool plans_bf16_logits(const Config& config, const Machine& machine);
// Bytes of activations a rank of the machine holds for micro-batches of `micro_batch` sequences
// (its slice of them under tensor parallelism; of a pipeline stage's `part` of the model, for one
// micro-batch in flight).
std::uint64_t predicted_activation_bytes(const Config& config, const Machine& machine, std::int64_t micro_batch,
                                         Recompute recompute, int tensor = 1, const ModelPart& part = {});
// Bytes of activations a rank of pipeline stage `stage` holds: each of its chunks' part, once for
// each micro-batch the schedule (parallel.pipeline_schedule) keeps in flight through the chunk,
// as the stage allocates them (train/pipeline_stage.hpp).
std::uint64_t stage_activation_bytes(const Config& config, const Machine& machine, std::int64_t micro_batch,
                                     Recompute recompute, int tensor, const PipelineShape& pipeline, int stage);
// The tensor-parallel degrees the planner considers on this machine: 2, 4, ... up to the fast
// group, when that group is NVLink (or NVSwitch), never across a PCIe, socket or network
// boundary, and only those that split the model's heads, MLP width and vocabulary.
std::vector<int> tensor_degrees_for(const Config& config, const Machine& machine);
// The same degrees, and why the others are not: `no_group` when the machine has no NVLink group
// at all (CPU ranks, PCIe, one GPU), else one line per power of two up to the group refused
// ("parallel.tensor = 8: n_head 25 does not divide by 8 tensor-parallel ranks").
struct TensorDegrees {
  std::vector<int> degrees;
  std::vector<std::string> refused;
  std::string no_group;
};
TensorDegrees tensor_degrees(const Config& config, const Machine& machine);
// Every strategy (ddp, zero1, zero2, zero3, and hsdp with groups at the fast-link boundary or
// the node when there is a slower level above it), ranked, with the recommendation. Tensor
// parallelism inside an NVLink group (tensor_degrees_for) is planned too when no strategy fits
// alone or when the data-parallel ranks would outnumber the global batch's sequences, and the
// deck's own parallel.tensor (on any links) when it sets one. When none
// fits with the deck's model.recompute, the first stronger recomputation under which some do is
// planned as well, and the recommendation names it and what it costs.
PlanResult plan_strategies(const Config& config, const Machine& machine);
// The row the planner's rule picks among `rows` that fit, with at most `max_pipeline` stages: the
// fastest, or within 5% of it the one with fewer stages, then a smaller tensor degree, then a less
// sharded strategy (ddp, zero1, zero2, hsdp, zero3); -1 when none fits.
int choose_row(const std::vector<StrategyPrediction>& rows, int max_pipeline = 1 << 30);
// The hsdp group the planner proposes on this machine (as parallel.shard_group; make_mesh turns
// it into the mesh): the fast group, else the node, when a slower level lies above it; 0 when
// there is none (one level only).
int hsdp_group_for(const Machine& machine);

// The table and the recommendation, as `shardtrain plan` prints them.
std::string format_plan(const PlanResult& plan, const Machine& machine);

}  // namespace st
