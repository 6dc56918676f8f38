#include "plan/planner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <tuple>

#include "core/error.hpp"
#include "core/text.hpp"
#include "data/batches.hpp"
#include "exec/kernel_scratch.hpp"
#include "model/deck_shape.hpp"
#include "model/model.hpp"
#include "parallel/deck_plan.hpp"
#include "parallel/plan.hpp"
#include "parallel/shard_layout.hpp"
#include "parallel/sharded.hpp"

namespace st {
namespace {

// From least to most sharded: the order in which close predictions are preferred.
const std::vector<StrategyKind> kOrder = {StrategyKind::ddp, StrategyKind::zero1, StrategyKind::zero2, StrategyKind::hsdp,
                                          StrategyKind::zero3};
// Predictions closer than this are a tie (the model's figures are estimates, checked to 25% in
// docs/benchmarks.md); the less sharded strategy wins it: fewer collectives, and less of its step
// depends on hiding traffic behind compute.
constexpr double kTieMargin = 0.05;

int order_of(StrategyKind s) {
  return static_cast<int>(std::find(kOrder.begin(), kOrder.end(), s) - kOrder.begin());
}

// Backward is two thirds of a step's FLOPs (two matmuls per forward one).
constexpr double kBackwardShare = 2.0 / 3.0;
// The optimizer reads parameters, gradients, m and v and writes parameters, m and v: 7 x 4 bytes.
constexpr double kOptimizerBytesPerElement = 28.0;

double seconds(std::uint64_t bytes, double gbps) { return gbps > 0 ? static_cast<double>(bytes) / (gbps * 1e9) : 0.0; }

// The smallest total of the rows planned with `recompute` whose pipelines (if any) are cut as the
// deck cuts them.
std::uint64_t smallest_without(const std::vector<StrategyPrediction>& rows, Recompute recompute) {
  std::uint64_t smallest = 0;
  for (const auto& row : rows)
    if (row.recompute == recompute && row.stage_blocks.empty() && (smallest == 0 || row.total_bytes() < smallest))
      smallest = row.total_bytes();
  return smallest;
}

std::string ms(double s) {
  char b[32];
  std::snprintf(b, sizeof b, s < 0.01 ? "%.3f" : s < 1 ? "%.2f" : "%.1f", s * 1e3);
  return b;
}

// A ratio as the reasons print it: "8.5x". Tests read it back against the rows to this precision.
std::string times(double ratio) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1fx", ratio);
  return b;
}

std::string percent(double fraction) { return std::to_string(std::lround(100 * fraction)) + "%"; }

// What a rank sends per step over the data-parallel ranks (the tensor group's sums aside).
std::uint64_t sent(const StrategyPrediction& p) { return p.fast_bytes + p.slow_bytes; }

// A row's pipeline and tensor split as the deck sets them, after `lead`: " with parallel.pipeline
// = 4, parallel.tensor = 8"; "" for whole layers on every rank.
std::string split_words(const StrategyPrediction& p, const std::string& lead) {
  std::string words;
  if (p.pipeline > 1) words = "parallel.pipeline = " + std::to_string(p.pipeline);
  if (p.virtual_stages > 1)
    words += ", parallel.pipeline_schedule = \"interleaved\", parallel.virtual_stages = " +
             std::to_string(p.virtual_stages);
  if (!p.stage_blocks.empty()) words += ", parallel.stage_blocks = " + stage_blocks_text(p.stage_blocks);
  if (p.tensor > 1) words += (words.empty() ? "" : ", ") + std::string("parallel.tensor = ") + std::to_string(p.tensor);
  return words.empty() ? words : lead + words;
}

// Whether `row` is a better representative than `than` of a set of rows: one that fits over one
// that does not, then the faster of two that fit, the smaller of two that do not.
bool better_row(const StrategyPrediction& row, const StrategyPrediction& than) {
  if (row.fits != than.fits) return row.fits;
  return row.fits ? row.step_s < than.step_s : row.total_bytes() < than.total_bytes();
}

// The best row (better_row) among those `keep` accepts, or null.
template <class Keep>
const StrategyPrediction* best_row(const std::vector<StrategyPrediction>& rows, Keep keep) {
  const StrategyPrediction* best = nullptr;
  for (const auto& row : rows)
    if (keep(row) && (!best || better_row(row, *best))) best = &row;
  return best;
}

// When the choice is not the fastest row (rows[0]), why: the tie margin. Empty otherwise.
std::string tie_clause(const PlanResult& r, int chosen) {
  if (chosen == 0) return "";
  const StrategyPrediction &c = r.rows[static_cast<std::size_t>(chosen)], &best = r.rows.front();
  return "; " + name_of(best.strategy) + split_words(best, " with ") +
         " is predicted " + ms(best.step_s) + " ms (this choice " + percent(c.step_s / best.step_s - 1) +
         " slower): inside the planner's " + percent(kTieMargin) +
         " margin, where the less sharded strategy is preferred (fewer collectives, less hidden behind compute)";
}

// Why a pipelined choice: what passes between its stages and over which link, what its bubble
// costs, and what the best row without a pipeline would do instead.
std::string pipeline_reason(const PlanResult& r, int chosen, const Machine& m) {
  const StrategyPrediction& c = r.rows[static_cast<std::size_t>(chosen)];
  const auto b = [](std::uint64_t x) { return format_bytes(static_cast<double>(x)); };
  const int stage_ranks = m.world() / c.pipeline;
  // The best row without a pipeline: the fastest that fits, else the smallest.
  const StrategyPrediction* flat = best_row(r.rows, [](const StrategyPrediction& row) { return row.pipeline == 1; });
  std::ostringstream why;
  why << c.strategy << (c.strategy == StrategyKind::hsdp ? " in groups of " + std::to_string(c.group) : "")
      << " within each of " << c.pipeline << " pipeline stages of " << stage_ranks << " rank(s)"
      << (stage_ranks >= m.ranks_per_node ? " (" + std::to_string(stage_ranks / m.ranks_per_node) + " node(s))" : "")
      << split_words(c, ", with ") << ": each stage holds "
      << (c.virtual_stages > 1 ? std::to_string(c.virtual_stages) + " chunks of consecutive blocks" : "consecutive blocks")
      << (c.stage_blocks.empty() ? ""
                                 : " cut by memory (cut by FLOPs a stage would not fit: the fuller stages give blocks "
                                   "to the others)")
      << ", and between stages only each "
      << "micro-batch's activations and their gradients pass, " << b(c.pipeline_bytes) << " per step from the busiest rank over the "
      << c.pipeline_level << " (" << ms(c.pipeline_exposed_s) << " ms of it not hidden behind compute); the bubble, "
      << (c.virtual_stages > 1 ? "(P - 1) / (m V) = " : "(P - 1) / m = ")
      << percent(c.bubble_s / (c.compute_s - c.bubble_s)) << " of a stage's work, idles "
      << ms(c.bubble_s) << " ms. ";
  if (flat && flat->fits)
    why << "Without a pipeline the fastest, " << flat->strategy << split_words(*flat, " with ") << ", is predicted "
        << ms(flat->step_s) << " ms (exposed communication " << ms(flat->exposed_s) << ", sending " << b(sent(*flat))
        << " per step" << (flat->slow_level.empty() ? "" : ", " + b(flat->slow_bytes) + " of it over the " + flat->slow_level)
        << "). ";
  else if (flat)
    why << "Without a pipeline nothing fits: the smallest, " << flat->strategy << split_words(*flat, " with ") << ", needs "
        << b(flat->total_bytes()) << " per rank, over the " << format_bytes(m.memory_per_rank) << " per rank ("
        << m.memory_source << "). ";
  why << "A rank of the fullest stage holds " << b(c.total_bytes()) << " (activations of the micro-batches in flight "
      << b(c.activation_bytes) << ", model state " << b(c.state_bytes) << "). Predicted step " << ms(c.step_s)
      << " ms (compute " << ms(c.compute_s) << ", exposed communication " << ms(c.exposed_s)
      << "). Set" << split_words(c, " ") << " in the deck";
  return why.str();
}

}  // namespace

std::string stage_blocks_text(const std::vector<std::int64_t>& blocks) {
  std::string list = "[";
  for (std::size_t i = 0; i < blocks.size(); ++i) list += (i ? ", " : "") + std::to_string(blocks[i]);
  return list + "]";
}

int hsdp_group_for(const Machine& m) {
  if (m.fast_group > 1 && m.fast_group < m.ranks_per_node) return m.fast_group;
  if (m.nodes > 1 && m.ranks_per_node > 1) return m.ranks_per_node;
  return 0;
}

bool plans_flash_attention(const Config& config, const Machine& m) {
  const bool flash_backend = m.gpu && config.parallel.precision == Precision::bf16 &&
                             config.parallel.attention == AttentionChoice::automatic;
  return attention_uses_flash(flash_backend, static_cast<int>(model_shape(config.model).head_dim()));
}

bool plans_bf16_logits(const Config& config, const Machine& m) {
  if (config.parallel.stores_bf16_activations()) return true;  // its classifier is the fused one
  return m.gpu && config.parallel.precision == Precision::bf16 &&
         config.parallel.classifier == ClassifierChoice::automatic;
}

std::uint64_t predicted_activation_bytes(const Config& config, const Machine& m, std::int64_t micro_batch,
                                         Recompute recompute, int tensor, const ModelPart& part) {
  const ModelShape shape = model_shape(config.model);
  const int B = static_cast<int>(micro_batch);
  const int heads = attention_heads_at_once(m.gpu, B, static_cast<int>(shape.n_head) / tensor, m.threads_per_rank);
  const std::size_t value_bytes = config.parallel.activation_value_bytes();
  return activation_sizes(shape, B, recompute, heads, m.gpu, tensor, tensor > 1 && config.parallel.sequence_parallel,
                          plans_flash_attention(config, m), plans_bf16_logits(config, m))
      .of_part(part, shape)
      .bytes(value_bytes, 4);
}

namespace {

// stage_activation_bytes of the stage's parts (pipeline_stage_parts).
std::uint64_t stage_kept_bytes(const Config& config, const Machine& m, std::int64_t micro_batch, Recompute recompute,
                               int tensor, const PipelineShape& pipeline, int stage, const std::vector<ModelPart>& parts) {
  std::uint64_t bytes = 0;
  for (int c = 0; c < pipeline.virtual_stages; ++c)
    bytes += predicted_activation_bytes(config, m, micro_batch, recompute, tensor, parts[static_cast<std::size_t>(c)]) *
             static_cast<std::uint64_t>(pipeline_chunk_in_flight(config.parallel.pipeline_schedule, pipeline, stage, c));
  return bytes;
}

}  // namespace

std::uint64_t stage_activation_bytes(const Config& config, const Machine& m, std::int64_t micro_batch,
                                     Recompute recompute, int tensor, const PipelineShape& pipeline, int stage) {
  return stage_kept_bytes(config, m, micro_batch, recompute, tensor, pipeline, stage,
                          pipeline_stage_parts(model_shape(config.model), pipeline, stage));
}

TensorDegrees tensor_degrees(const Config& config, const Machine& m) {
  TensorDegrees d;
  // NVLink's link names in `nvidia-smi topo -m` are NV<count>; PCIe, socket and network ones are not.
  if (!m.gpu) {
    d.no_group = "the ranks are CPU ranks (tensor parallelism's per-layer exchanges stay inside NVLink/NVSwitch)";
    return d;
  }
  if (m.fast_group < 2 || !m.fast_link.starts_with("NV")) {
    d.no_group = "the machine has no NVLink group to split layers in (fast links: " + m.fast_link +
                 "; tensor parallelism's per-layer exchanges stay inside NVLink/NVSwitch)";
    return d;
  }
  const ModelShape shape = model_shape(config.model);
  for (int t = 2; t <= m.fast_group; t *= 2) {
    if (m.fast_group % t != 0) continue;
    std::string problem = m.world() % t != 0 ? std::to_string(t) + " does not divide the " + std::to_string(m.world()) +
                                                   " ranks"
                                             : tensor_split_problem(shape, t);
    if (problem.empty()) d.degrees.push_back(t);
    else d.refused.push_back("parallel.tensor = " + std::to_string(t) + ": " + problem);
  }
  return d;
}

std::vector<int> tensor_degrees_for(const Config& config, const Machine& m) { return tensor_degrees(config, m).degrees; }

namespace {

// What the kernels of a rank holding `parts` of the model (none: all of it) hold beside the
// accounted buffers (exec/kernel_scratch.hpp): a GPU's, cub's sort estimated; on a CPU rank
// nothing, but for bf16 activations the host reference's widening slots.
std::uint64_t kernel_scratch_bytes(const Config& config, const Machine& m, std::int64_t micro_batch, int tensor,
                                   const std::vector<ModelPart>& parts) {
  if (!m.gpu && !config.parallel.stores_bf16_activations()) return 0;
  const ModelShape shape = model_shape(config.model);
  const bool sequence_parallel = tensor > 1 && config.parallel.sequence_parallel;
  // A stage's chunks share its kernels: each block of scratch as large as any of them asks.
  KernelWorkload all;
  for (const ModelPart& part : parts.empty() ? std::vector<ModelPart>{ModelPart{}} : parts) {
    const KernelWorkload w = kernel_workload(shape, static_cast<int>(micro_batch), tensor, sequence_parallel, part);
    all.products.insert(all.products.end(), w.products.begin(), w.products.end());
    all.rows = w.rows;
    all.norm_rows = w.norm_rows;
    all.norm_width = w.norm_width;
    all.norm_vectors = w.norm_vectors;
    all.embeds = all.embeds || w.embeds;
    all.heads = all.heads || w.heads;
  }
  if (!m.gpu) return host_bf16_slots(all).bytes();
  KernelScratchChoices choices;
  // bf16 activations' kernels multiply bf16 as stored: no operands rounded into scratch.
  choices.bf16_storage = config.parallel.stores_bf16_activations();
  choices.bf16_matmuls = config.parallel.precision == Precision::bf16 && !choices.bf16_storage;
  choices.fused_classifier = plans_bf16_logits(config, m);
  choices.sort_temp_bytes = estimated_sort_temp_bytes(all.rows);
  return kernel_scratch(all, choices).total();
}

// Training FLOPs per token of a stage's parts: their blocks', and the LM head's where one ends
// the model (the embeddings' lookups are not counted).
double parts_train_flops_per_token(const ModelShape& shape, const std::vector<ModelPart>& parts) {
  double flops = 0;
  for (const ModelPart& part : parts)
    flops += static_cast<double>(part.blocks(shape)) * block_train_flops_per_token(shape) +
             (part.heads(shape) ? head_train_flops_per_token(shape) : 0.0);
  return flops;
}

// The parts stage s of the pipeline holds with `total` blocks among its chunks, shared as
// chunk_blocks shares them: the model's first chunk from its start (the embeddings), its last to
// its end (the head), the others in between (they hold neither; as the blocks are alike, where
// does not matter).
std::vector<ModelPart> stage_parts(const ModelShape& shape, const PipelineShape& pipeline, int s, std::int64_t total) {
  const int V = pipeline.virtual_stages, P = pipeline.stages;
  std::vector<ModelPart> parts;
  for (int c = 0; c < V; ++c) {
    const std::int64_t blocks = total / V + (c < total % V ? 1 : 0);
    const int place = c * P + s;
    if (place == 0) parts.push_back({0, blocks});
    else if (place == P * V - 1) parts.push_back({shape.n_layer - blocks, shape.n_layer});
    else parts.push_back({1, 1 + blocks});
  }
  return parts;
}

// The cut by memory: the most blocks each stage's ranks hold within `capacity` bytes (`bytes(s,
// blocks)`: what a rank of stage s holds with that many among its V chunks, growing with them),
// then the stages' totals as capped_balanced_blocks balances them (at least a block a chunk),
// each stage's chunks sharing its total evenly (chunk_blocks). Empty where some stage holds not
// even a block a chunk, or the stages cannot hold the model between them. A stage's bytes grow by
// about as much with each block (its state and activations; a sharded strategy's pools grow
// faster over the first few): the line through V and 2 V blocks guesses its most, and a search
// that gallops from the guess, then halves, finds the exact count in a few plans.
template <class Bytes>
std::vector<std::int64_t> memory_balanced_blocks(const ModelShape& shape, const PipelineShape& pipeline,
                                                 double capacity, const Bytes& bytes) {
  const int stages = pipeline.stages;
  const std::int64_t V = pipeline.virtual_stages;
  const std::int64_t most_any = shape.n_layer - (stages - 1) * V;  // every other chunk keeps a block
  if (most_any < V) return {};
  const auto fits = [&](int s, std::int64_t blocks) { return bytes(s, blocks) <= capacity; };
  std::vector<std::int64_t> most(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s) {
    const double least = bytes(s, V);
    if (least > capacity) return {};
    std::int64_t guess = V;
    if (most_any >= 2 * V) {
      const double per_block = (bytes(s, 2 * V) - least) / static_cast<double>(V);
      guess = per_block <= 0 ? most_any
                             : std::clamp<std::int64_t>(V + static_cast<std::int64_t>((capacity - least) / per_block), V,
                                                        most_any);
    }
    // fits(lo) and, past the end, !fits(hi): gallop from the guess to bracket the last that fits.
    std::int64_t lo = V, hi = most_any + 1;
    if (fits(s, guess)) {
      lo = guess;
      for (std::int64_t step = 1; lo + step < hi; step *= 2) {
        if (!fits(s, lo + step)) {
          hi = lo + step;
          break;
        }
        lo += step;
      }
    } else {
      hi = guess;
      for (std::int64_t step = 1; hi - step > lo; step *= 2) {
        if (fits(s, hi - step)) {
          lo = hi - step;
          break;
        }
        hi -= step;
      }
    }
    while (hi - lo > 1) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      if (fits(s, mid)) lo = mid;
      else hi = mid;
    }
    most[static_cast<std::size_t>(s)] = lo;
  }
  const std::vector<std::int64_t> totals = capped_balanced_blocks(shape, most, V);
  if (totals.empty() || V == 1) return totals;
  return chunk_blocks(totals, static_cast<int>(V));
}

// The ranks of one pipeline stage as a machine of their own. Stages are consecutive blocks of
// world / P ranks (the pipeline outermost): whole nodes where a stage is a node or more, else a
// part of one node.
Machine stage_machine(const Machine& m, int stages) {
  if (stages <= 1) return m;
  Machine stage = m;
  const int stage_world = std::max(1, m.world() / stages);
  stage.ranks_per_node = std::min(m.ranks_per_node, stage_world);
  stage.nodes = std::max(1, stage_world / m.ranks_per_node);
  stage.fast_group = std::min(m.fast_group, stage.ranks_per_node);
  return stage;
}

StrategyPrediction predict_reduced(const Config& config, const Machine& machine, StrategyKind strategy, int group,
                                   std::optional<Recompute> recompute, int tensor, GradReduction reduction,
                                   PipelineCut cut) {
  // The strategy runs over the data-parallel ranks: `world` of them, `L` per node, each a
  // tensor group of `tensor` consecutive ranks; under a pipeline, a stage's (its world is
  // machine.world() / pipeline ranks, `m` its machine).
  const int stages = static_cast<int>(config.parallel.pipeline);
  const Machine m = stage_machine(machine, stages);
  const int stage_world = machine.world() / stages;
  const int world = stage_world / tensor;
  const BatchPlan batches = plan_batches(config.data, config.model.seq_len, world, config.deck_path);
  const ModelShape shape = model_shape(config.model);
  const std::int64_t mb = batches.accum_steps;
  const Recompute chosen_recompute = recompute.value_or(config.model.recompute);
  const ParallelChoice choice{strategy, group, tensor, chosen_recompute, reduction};
  // The plan the run would make: its mesh, buffers, buckets and collectives. Under a pipeline,
  // the stage that holds the most (its part's parameters, and its part's activations for each
  // micro-batch the schedule keeps in flight through it): the rank that must fit.
  const PipelineShape pipeline = deck_pipeline_shape(config, mb);
  // What a rank of stage s holds with `parts`: its parts' state, workspace and activations.
  struct Stage {
    ParamLayout layout;
    std::optional<ParallelPlan> plan;
    std::uint64_t kept = 0, scratch = 0, total = 0;
    double flops = 0;  // training FLOPs per token of its parts
  };
  const auto stage_holds = [&](int s, const std::vector<ModelPart>& parts) {
    Stage stage;
    stage.layout = stage_layout(shape, TensorSplit{tensor, 0}, parts);
    stage.plan.emplace(choice_plan(config, choice, stage.layout, stage_world, std::min(m.ranks_per_node, stage_world), mb,
                                   batches.micro_batch, parts));
    stage.kept = stage_kept_bytes(config, m, batches.micro_batch, chosen_recompute, tensor, pipeline, s, parts);
    stage.scratch = kernel_scratch_bytes(config, m, batches.micro_batch, tensor, parts);
    stage.total = stage.plan->model_state().total() + workspace_estimate(*stage.plan) + stage.scratch + stage.kept;
    stage.flops = parts_train_flops_per_token(shape, parts);
    return stage;
  };
  // The stages evaluated (without a pipeline, the whole model as one), and which of them holds
  // the most memory (the rank that must fit), the most parameters (its strategy's traffic and
  // optimizer sweep are the step's) and the most FLOPs (its tensor-group sums sit between the
  // computations that pace the step). Under a cut by memory these need not be one stage.
  std::vector<Stage> evaluated;
  std::size_t fullest = 0, widest = 0, paced = 0;
  // The pipeline's parts, cut once (by FLOPs, or as parallel.stage_blocks says).
  std::vector<ModelPart> all_parts =
      stages > 1 ? pipeline_parts(shape, pipeline.chunks(), pipeline.blocks) : std::vector<ModelPart>{};
  std::vector<std::int64_t> memory_cut;
  if (stages > 1) {
    // Cut by FLOPs, one of the first stage (the embeddings, the most micro-batches in flight),
    // the second (of the middle stages the one with the most blocks and the most in flight:
    // parts do not grow and in-flight counts fall along the pipeline) and the last (the head)
    // holds the most, has the most parameters and the most FLOPs; cut by hand or by memory, any
    // stage may.
    const auto evaluate = [&](bool every_stage) {
      std::vector<int> candidates = {0, 1, stages - 1};
      if (every_stage) {
        candidates.clear();
        for (int s = 0; s < stages; ++s) candidates.push_back(s);
      }
      evaluated.clear();
      fullest = widest = paced = 0;
      for (const int s : candidates) {
        evaluated.push_back(stage_holds(s, pipeline_stage_parts(all_parts, pipeline, s)));
        const Stage& stage = evaluated.back();
        const std::size_t i = evaluated.size() - 1;
        if (stage.total > evaluated[fullest].total) fullest = i;
        if (stage.layout.total() > evaluated[widest].layout.total()) widest = i;
        if (stage.flops > evaluated[paced].flops) paced = i;
      }
    };
    evaluate(!pipeline.blocks.empty());
    // Where the FLOPs' cut overfills a stage, the cut by memory: each stage as many blocks as its
    // ranks hold at most, the FLOPs as even as those caps allow.
    if (cut == PipelineCut::memory_where_needed && pipeline.blocks.empty() && m.memory_per_rank > 0 &&
        static_cast<double>(evaluated[fullest].total) > m.memory_per_rank) {
      memory_cut = memory_balanced_blocks(shape, pipeline, m.memory_per_rank, [&](int s, std::int64_t total) {
        return static_cast<double>(stage_holds(s, stage_parts(shape, pipeline, s, total)).total);
      });
      if (!memory_cut.empty()) {
        all_parts = pipeline_parts(shape, pipeline.chunks(), memory_cut);
        evaluate(true);
      }
    }
  } else {
    Stage whole_model;
    whole_model.layout = make_layout(shape, TensorSplit{tensor, 0});
    whole_model.plan.emplace(
        choice_plan(config, choice, whole_model.layout, m.world(), m.ranks_per_node, mb, batches.micro_batch));
    whole_model.kept = predicted_activation_bytes(config, m, batches.micro_batch, chosen_recompute, tensor);
    whole_model.scratch = kernel_scratch_bytes(config, m, batches.micro_batch, tensor, {});
    evaluated.push_back(std::move(whole_model));
  }
  const ParallelPlan& whole = *evaluated[fullest].plan;    // the rank that must fit
  const ParallelPlan& busiest = *evaluated[widest].plan;   // whose traffic and optimizer sweep
  const ParamLayout& busiest_layout = evaluated[widest].layout;
  const ParallelPlan& pacing = *evaluated[paced].plan;     // whose tensor-group sums
  const std::uint64_t scratch = evaluated[fullest].scratch;  // the kernels' (kernel_scratch_bytes)
  const bool hsdp = busiest.grouped();
  const int n = busiest.mesh().shards;
  const ShardLayout& shards = busiest.shards();

  StrategyPrediction p;
  p.strategy = strategy;
  p.group = n;
  p.tensor = tensor;
  p.recompute = chosen_recompute;
  p.grad_reduction = reduction;
  p.reduces_each_micro_batch = whole.reduces_each_micro_batch();
  p.state_bytes = whole.model_state().total();
  p.activation_bytes = evaluated[fullest].kept;
  p.workspace_bytes = workspace_estimate(whole) + scratch;
  p.kernel_scratch_bytes = scratch;
  p.fits = m.memory_per_rank <= 0 || static_cast<double>(p.total_bytes()) <= m.memory_per_rank;

  // A data-parallel rank's tokens, their FLOPs split over its tensor group.
  const double tokens = static_cast<double>(batches.global_batch * batches.seq_len) / world / tensor;
  p.recompute_s = recompute_flops_per_token(shape, batches.seq_len, p.recompute, plans_flash_attention(config, m)) *
                 tokens / m.flops_per_rank;
  p.compute_s = train_flops_per_token(shape, batches.seq_len) * tokens / m.flops_per_rank + p.recompute_s;
  if (stages > 1) {
    // A stage computes its share of the FLOPs, and idles the pipeline's bubble besides. The
    // busiest stage paces the pipeline: its blocks' FLOPs, and the LM head's where it holds it.
    double share = 0;
    for (int s = 0; s < stages; ++s)
      share = std::max(share, parts_train_flops_per_token(shape, pipeline_stage_parts(all_parts, pipeline, s)) /
                                  train_flops_per_token(shape, shape.seq_len));
    const double bubble = pipeline_bubble(pipeline);
    p.pipeline = stages;
    p.virtual_stages = pipeline.virtual_stages;
    p.stage_blocks = memory_cut;
    p.recompute_s *= share;
    p.compute_s *= share;
    p.bubble_s = p.compute_s * bubble;
    p.compute_s += p.bubble_s;
  }
  // The stage's own work, without the bubble: what its traffic can hide behind.
  const double busy_s = p.compute_s - p.bubble_s;
  const std::int64_t calls = busiest.group_calls();

  // Communication by level. `L` data-parallel ranks per node; a ring over `ranks` of them spans
  // ranks x tensor consecutive ranks, on the fast links while those hold them.
  const int L = std::max(1, m.ranks_per_node / tensor);
  auto bw_inside = [&](int ranks) { return ranks * tensor <= m.fast_group ? m.fast_gbps : m.node_gbps; };
  const std::string slower_in_node = m.node_link;
  double comm = 0, replica_comm = 0;
  if (!hsdp && world > 1) {
    if (m.nodes == 1) {
      p.fast_bytes = busiest.group_bytes();
      comm = seconds(p.fast_bytes, bw_inside(world)) + calls * m.latency_s;
      if (world > m.fast_group) p.slow_bytes = p.fast_bytes, p.fast_bytes = 0, p.slow_level = slower_in_node;
    } else if (config.parallel.collectives == Collectives::flat) {
      // One ring over every rank: each step of it waits for the slowest link, the network.
      p.slow_bytes = busiest.group_bytes();
      p.slow_level = "network";
      comm = seconds(p.slow_bytes, m.inter_node_gbps) + calls * (m.latency_s + m.inter_latency_s);
    } else {
      // Two-level: inside the node on all the data, across nodes on 1/L of it.
      const LevelBytes levels = busiest.two_level_bytes(busiest_layout, L);
      p.fast_bytes = levels.node;
      p.slow_bytes = levels.network;
      p.slow_level = "network";
      comm = seconds(p.fast_bytes, bw_inside(L)) + seconds(p.slow_bytes, m.inter_node_gbps) +
             calls * (m.latency_s + m.inter_latency_s);
    }
  } else if (hsdp) {
    p.fast_bytes = busiest.group_bytes();
    const bool group_crosses_nodes = n > L;
    comm = seconds(p.fast_bytes, group_crosses_nodes ? m.inter_node_gbps : bw_inside(n)) +
           calls * (m.latency_s + (group_crosses_nodes ? m.inter_latency_s : 0));
    p.slow_bytes = busiest.replica_bytes();
    const bool replicas_cross_nodes = world > L;
    p.slow_level = replicas_cross_nodes ? "network" : slower_in_node;
    replica_comm = seconds(p.slow_bytes, replicas_cross_nodes ? m.inter_node_gbps : m.node_gbps) + m.latency_s +
                   (replicas_cross_nodes ? m.inter_latency_s : 0);
  }
  // The tensor group's sums sit between the layers' computations: all of it is exposed.
  if (tensor > 1) {
    p.tensor_bytes = pacing.tensor_bytes();
    p.tensor_s = seconds(p.tensor_bytes, bw_inside(1)) + static_cast<double>(pacing.tensor_calls()) * m.latency_s;
  }
  p.comm_s = comm + replica_comm + p.tensor_s;

  // What compute hides (parallel.overlap): ddp's buckets and zero1/zero2's reduce-scatters run
  // during the last micro-batch's backward (two thirds of its FLOPs), zero1/zero2's parameter all-gather follows the
  // update; zero3/hsdp prefetch gathers and reduce-scatter through every forward and backward,
  // and hsdp's all-reduce across groups follows the reduce-scatters.
  // What starts only when backward ends is exposed whatever the overlap: ddp's last bucket (the
  // one holding the embeddings, whose gradients the tied head completes last), the embeddings'
  // reduce-scatter.
  // Recomputation runs inside backward.
  const double last_backward = (kBackwardShare * (busy_s - p.recompute_s) + p.recompute_s) / static_cast<double>(mb);
  const double embeddings = static_cast<double>(shards.padded(0)) / static_cast<double>(shards.padded_total());
  if (!config.parallel.overlap) {
    p.exposed_s = p.comm_s;
  } else if (!busiest.optimizer_sharded()) {
    // ddp's buckets start in the order backward finishes them: the last holds the embeddings.
    double total = 0;
    for (const GradientBucket& b : busiest.buckets()) total += static_cast<double>(b.end - b.begin);
    const double last = comm * static_cast<double>(busiest.buckets().back().end - busiest.buckets().back().begin) / total;
    p.exposed_s = last + std::max(0.0, comm - last - last_backward);
  } else if (!busiest.params_sharded()) {
    const double reduce = comm / 2, last = reduce * embeddings;
    p.exposed_s = last + std::max(0.0, reduce - last - last_backward) + comm / 2;
  } else {
    const double last = comm / static_cast<double>(2 * mb + 1) * embeddings;
    p.exposed_s = last + std::max(0.0, comm - last - busy_s) + replica_comm;
  }
  if (config.parallel.overlap) p.exposed_s += p.tensor_s;

  if (stages > 1) {
    // Between stages each micro-batch's residual stream goes forward and its gradient back: a
    // middle stage sends both, an end stage one of them; with V chunks a stage, each chunk's
    // (the first stage's later chunks also send gradients back to the last stage, and so on).
    // The slowest hop paces the pipeline: the network where the stages span nodes, else the
    // links between the node's fast groups.
    const std::uint64_t message = pipeline_message_bytes(shape, batches.micro_batch, tensor,
                                                         tensor > 1 && config.parallel.sequence_parallel,
                                                         config.parallel.activation_value_bytes());
    const int V = pipeline.virtual_stages;
    const int directions = stages > 2 ? 2 * V : 2 * V - 1;
    p.pipeline_bytes = message * static_cast<std::uint64_t>(directions * mb);
    double gbps = machine.fast_gbps, latency = machine.latency_s;
    p.pipeline_level = machine.fast_link;
    if (machine.nodes > 1) {
      gbps = machine.inter_node_gbps;
      latency += machine.inter_latency_s;
      p.pipeline_level = "network";
    } else if (machine.world() > machine.fast_group) {
      gbps = machine.node_gbps;
      p.pipeline_level = machine.node_link;
    }
    const double per_message = seconds(message, gbps) + latency;
    p.pipeline_s = per_message * directions * static_cast<double>(mb);
    // The sends are non-blocking: in the steady state a micro-batch's messages (two, or a
    // stage's per chunk) hide behind its forward and backward; filling and draining the
    // pipeline waits for one message per hop each way.
    const double per_micro_batch = busy_s / static_cast<double>(mb);
    p.pipeline_exposed_s = 2.0 * (stages - 1) * per_message +
                           static_cast<double>(mb) * std::max(0.0, std::max(2, directions) * per_message - per_micro_batch);
    p.comm_s += p.pipeline_s;
    p.exposed_s += p.pipeline_exposed_s;
  }

  if (m.memory_gbps > 0) {
    const double updated = static_cast<double>(busiest.optimizer().elements);
    p.optimizer_s = updated * kOptimizerBytesPerElement / (m.memory_gbps * 1e9);
  }
  p.step_s = p.compute_s + p.exposed_s + p.optimizer_s;
  return p;
}

}  // namespace

StrategyPrediction predict_strategy(const Config& config, const Machine& m, StrategyKind strategy, int group,
                                    std::optional<Recompute> recompute, int tensor, PipelineCut cut) {
  const GradReduction asked = config.parallel.grad_reduction;
  if (asked != GradReduction::automatic) return predict_reduced(config, m, strategy, group, recompute, tensor, asked, cut);
  // auto: once a step (fewer bytes) where the whole gradient fits, else every micro-batch.
  StrategyPrediction once = predict_reduced(config, m, strategy, group, recompute, tensor, GradReduction::step, cut);
  if (once.fits) return once;
  StrategyPrediction each =
      predict_reduced(config, m, strategy, group, recompute, tensor, GradReduction::micro_batch, cut);
  if (!each.reduces_each_micro_batch) return once;
  // Where neither fits, the smaller says best what it would take.
  return each.fits || each.total_bytes() < once.total_bytes() ? each : once;
}

int choose_row(const std::vector<StrategyPrediction>& rows, int max_pipeline) {
  int chosen = -1;
  double best = 0;
  for (int i = 0; i < static_cast<int>(rows.size()); ++i) {
    const StrategyPrediction& row = rows[static_cast<std::size_t>(i)];
    if (row.fits && row.pipeline <= max_pipeline && (chosen < 0 || row.step_s < best)) {
      best = row.step_s;
      chosen = i;
    }
  }
  if (chosen < 0) return -1;
  // The fastest, or within the margin of it less recomputation (a pipeline cut by memory beside
  // a recomputing row), fewer stages, a smaller tensor degree, a less sharded strategy.
  const auto rank = [&](int i) {
    const StrategyPrediction& row = rows[static_cast<std::size_t>(i)];
    return std::make_tuple(row.recompute, row.pipeline, row.tensor, order_of(row.strategy), row.step_s);
  };
  for (int i = 0; i < static_cast<int>(rows.size()); ++i) {
    const StrategyPrediction& row = rows[static_cast<std::size_t>(i)];
    if (row.fits && row.pipeline <= max_pipeline && row.step_s <= best * (1 + kTieMargin) && rank(i) < rank(chosen))
      chosen = i;
  }
  return chosen;
}

PlanResult plan_strategies(const Config& config, const Machine& m) {
  PlanResult r;
  const bool plan_hsdp = hsdp_group_for(m) > 0 && m.world() % hsdp_group_for(m) == 0;
  std::vector<std::string> unsplit;  // why a split's data-parallel ranks cannot split the batch
  // Every strategy with each layer split over `tensor` ranks (1: whole layers) and the deck's
  // parallel.pipeline stages (`deck`: the deck with the pipeline planned); none when the
  // data-parallel ranks cannot split the global batch or a pipeline would get fewer micro-batches
  // than stages.
  // `quiet`: a split the planner tries of its own accord (interleaving), left out without a note
  // where the batch does not allow it.
  auto plan_all = [&](const Config& deck, Recompute recompute, int tensor, bool quiet) {
    const int stages = static_cast<int>(deck.parallel.pipeline);
    // hsdp runs within a stage: its groups are the stage's fast group or node.
    const Machine stage = stage_machine(m, stages);
    const int group = hsdp_group_for(stage);
    std::vector<StrategyPrediction> rows;
    try {
      if (stages > 1) {
        const BatchPlan batches =
            plan_batches(deck.data, deck.model.seq_len, m.world() / stages / tensor, deck.deck_path);
        if (batches.accum_steps < stages)
          throw Error(std::to_string(batches.accum_steps) + " micro-batch(es) a step go through each stage, fewer "
                      "than the stages");
        // A schedule the batch does not allow (interleaving's micro-batches not a multiple of the
        // stages) is refused inside predict_strategy, by the schedule itself.
      }
      for (const StrategyKind s : {StrategyKind::ddp, StrategyKind::zero1, StrategyKind::zero2, StrategyKind::zero3})
        rows.push_back(predict_strategy(deck, m, s, 0, recompute, tensor, PipelineCut::memory_where_needed));
      // hsdp's groups in data-parallel ranks: the fast group's or node's share of them.
      if (group > 0 && stage.world() % group == 0 && group % tensor == 0 && group / tensor > 1)
        rows.push_back(
            predict_strategy(deck, m, StrategyKind::hsdp, group / tensor, recompute, tensor, PipelineCut::memory_where_needed));
    } catch (const Error& e) {
      std::string split;
      if (stages > 1) split = "parallel.pipeline = " + std::to_string(stages);
      if (tensor > 1) split += (split.empty() ? "" : ", ") + std::string("parallel.tensor = ") + std::to_string(tensor);
      if (!quiet) unsplit.push_back(split.empty() ? e.what() : "with " + split + ", " + e.what());
      rows.clear();
    }
    return rows;
  };
  const auto fits = [](const StrategyPrediction& p) { return p.fits; };
  const Recompute asked = config.model.recompute;
  const TensorDegrees candidates = tensor_degrees(config, m);
  const std::vector<int>& degrees = candidates.degrees;
  const int asked_degree = static_cast<int>(config.parallel.tensor);
  // Whole layers first; tensor parallelism when they do not fit, or cannot split the batch; and
  // the deck's own parallel.tensor, whatever the links, since it asks for it. Several decks (the
  // same stages under two schedules) are one comparison: the tensor degrees are planned for all
  // of them or for none. `quiet[i]`: decks[i] is the planner's own try (plan_all's `quiet`).
  auto plan_split_all = [&](const std::vector<Config>& decks, const std::vector<bool>& quiet, Recompute recompute) {
    std::vector<std::vector<StrategyPrediction>> rows(decks.size());
    bool any_fits = false;
    for (std::size_t i = 0; i < decks.size(); ++i) {
      rows[i] = plan_all(decks[i], recompute, 1, quiet[i]);
      any_fits = any_fits || std::any_of(rows[i].begin(), rows[i].end(), fits);
    }
    const bool wanted = !any_fits;
    std::vector<int> splits;
    for (const int t : degrees)
      if (wanted || t == asked_degree) splits.push_back(t);
    if (asked_degree > 1 && std::find(degrees.begin(), degrees.end(), asked_degree) == degrees.end())
      splits.push_back(asked_degree);
    for (const int t : splits)
      for (std::size_t i = 0; i < decks.size(); ++i) {
        std::vector<StrategyPrediction> split = plan_all(decks[i], recompute, t, quiet[i]);
        rows[i].insert(rows[i].end(), split.begin(), split.end());
      }
    return rows;
  };
  auto plan_split = [&](const Config& deck, Recompute recompute) {
    return plan_split_all({deck}, {false}, recompute).front();
  };
  // The deck's pipeline (parallel.pipeline), and the planner's own: on several nodes, 2, 4, ...
  // stages of whole nodes (a power of two dividing the nodes, at most a block each), each
  // shown by its best row per tensor degree (the fastest that fits, else the smallest).
  const int asked_stages = static_cast<int>(config.parallel.pipeline);
  std::vector<int> searched_stages;
  if (m.nodes > 1)
    for (int stages = 2; stages <= m.nodes && stages <= config.model.n_layer; stages *= 2)
      if (m.nodes % stages == 0 && stages != asked_stages) searched_stages.push_back(stages);
  auto plan_layers = [&](Recompute recompute) {
    std::vector<StrategyPrediction> rows = plan_split(config, recompute);
    if (asked_stages > 1) {
      Config whole = config;
      whole.parallel.pipeline = 1;
      whole.parallel.virtual_stages = 1;
      whole.parallel.pipeline_schedule = PipelineSchedule::one_f_one_b;
      whole.parallel.stage_blocks.clear();
      std::vector<StrategyPrediction> unpipelined = plan_split(whole, recompute);
      rows.insert(rows.end(), unpipelined.begin(), unpipelined.end());
    }
    for (const int stages : searched_stages) {
      // The planner's own pipelines, balanced by FLOPs: 1f1b with one chunk a stage, and
      // Megatron's interleaved 1F1B with two (half the bubble, twice the messages, more
      // activations in flight) where the blocks and micro-batches allow. Per tensor degree the
      // better of the two shows; interleaving only when it is faster beyond the tie margin.
      std::vector<Config> decks;
      std::vector<bool> quiet;
      for (const int chunks : {1, 2}) {
        if (stages * chunks > config.model.n_layer) continue;
        Config staged = config;
        staged.parallel.pipeline = stages;
        staged.parallel.virtual_stages = chunks;
        staged.parallel.pipeline_schedule = chunks > 1 ? PipelineSchedule::interleaved : PipelineSchedule::one_f_one_b;
        staged.parallel.stage_blocks.clear();
        decks.push_back(staged);
        quiet.push_back(chunks > 1);
      }
      std::vector<StrategyPrediction> best;
      for (const std::vector<StrategyPrediction>& schedule_rows : plan_split_all(decks, quiet, recompute))
        for (const StrategyPrediction& row : schedule_rows) {
          auto same =
              std::find_if(best.begin(), best.end(), [&](const StrategyPrediction& b) { return b.tensor == row.tensor; });
          if (same == best.end()) {
            best.push_back(row);
            continue;
          }
          const bool margin_ok = row.virtual_stages == same->virtual_stages || !row.fits || !same->fits ||
                                 row.step_s < same->step_s * (1 - kTieMargin);
          if (margin_ok && better_row(row, *same)) *same = row;
        }
      rows.insert(rows.end(), best.begin(), best.end());
    }
    return rows;
  };
  r.rows = plan_layers(asked);
  if (!plan_hsdp)
    r.notes.push_back("hsdp: not planned, the machine has one level of links (no slower level to replicate across)");
  // Tensor parallelism is wanted when whole layers cannot split the batch or do not fit; when it
  // is wanted and no degree could be planned, the note says both causes from what was computed.
  const bool whole_split = std::any_of(r.rows.begin(), r.rows.end(), [](const StrategyPrediction& p) {
    return p.tensor == 1;
  });
  const bool wanted_tensor = std::none_of(r.rows.begin(), r.rows.end(), [](const StrategyPrediction& p) {
    return p.tensor == 1 && p.fits;
  });
  if (wanted_tensor && degrees.empty())
    r.notes.push_back(std::string("tensor parallelism: not planned, though ") +
                      (whole_split ? "no strategy fits with whole layers"
                                   : "whole layers cannot split the global batch of " +
                                         std::to_string(config.data.global_batch) + " sequences over the " +
                                         std::to_string(m.world()) + " ranks") +
                      ": " + (candidates.no_group.empty() ? join(candidates.refused, "; ") : candidates.no_group));
  for (const std::string& why : unsplit) r.notes.push_back("not planned: " + why);
  if (r.rows.empty()) {
    r.reason = "no strategy can split the global batch: " + join(unsplit, "; ");
    return r;
  }
  // Nothing fits as the deck asks (a pipeline cut as the deck cuts it): recomputation is the next
  // lever (selective first, the cheaper), planned beside the pipelines cut by memory that fit;
  // choose_row takes the faster, or within its margin the one that recomputes less.
  std::optional<Recompute> lever;
  const auto fits_as_cut = [](const StrategyPrediction& p) { return p.fits && p.stage_blocks.empty(); };
  if (std::none_of(r.rows.begin(), r.rows.end(), fits_as_cut))
    for (const Recompute stronger : {Recompute::selective, Recompute::full}) {
      if (stronger <= asked) continue;
      std::vector<StrategyPrediction> rows = plan_layers(stronger);
      if (std::none_of(rows.begin(), rows.end(), fits)) continue;
      lever = stronger;
      for (auto& row : rows)
        if (row.fits) r.rows.push_back(row);
      break;
    }

  std::stable_sort(r.rows.begin(), r.rows.end(), [](const StrategyPrediction& a, const StrategyPrediction& b) {
    if (a.fits != b.fits) return a.fits;
    return a.fits ? a.step_s < b.step_s : a.total_bytes() < b.total_bytes();
  });
  auto b = [](std::uint64_t x) { return format_bytes(static_cast<double>(x)); };
  const std::string limit = format_bytes(m.memory_per_rank) + " per rank (" + m.memory_source + ")";
  if (r.rows.empty() || !r.rows.front().fits) {
    const StrategyPrediction& small = r.rows.front();
    r.reason = "nothing fits: the smallest, " + name_of(small.strategy) + ", needs " + b(small.total_bytes()) +
               " per rank, more than the " + limit + ". More ranks (or nodes) shard it further; bf16 halves "
               "parameters and gradients; a smaller data.micro_batch shrinks the activations (" +
               b(small.activation_bytes) + ")" +
               (asked != Recompute::full ? ", which not even model.recompute = \"full\" brings within it" : "") + ".";
    return r;
  }
  const int chosen = choose_row(r.rows);
  r.chosen = chosen;
  if (lever && r.rows[chosen].recompute == *lever) {
    const StrategyPrediction& c = r.rows[chosen];
    r.recompute = *lever;
    // A pipeline cut by memory that fits without recomputing, slower.
    const StrategyPrediction* cut = best_row(r.rows, [&](const StrategyPrediction& row) {
      return row.fits && row.recompute == asked && !row.stage_blocks.empty();
    });
    const std::uint64_t smallest = smallest_without(r.rows, asked);
    std::ostringstream why;
    why << c.strategy << (c.strategy == StrategyKind::hsdp ? " with groups of " + std::to_string(c.group) : "")
        << split_words(c, " and ") << " with model.recompute = \"" << recompute_name(*lever) << "\": nothing fits with model.recompute = \""
        << recompute_name(asked) << "\"" << (cut ? " and pipelines cut by FLOPs" : "");
    if (smallest > 0) why << " (the smallest needs " << b(smallest) << " per rank, over the " << limit << ")";
    else why << " (over the " << limit << ")";
    if (cut)
      why << "; cut by memory, " << cut->strategy << split_words(*cut, " with ") << " fits without recomputing, predicted "
          << ms(cut->step_s) << " ms, slower";
    why << "; recomputing " << (*lever == Recompute::selective ? "the attention probabilities and GELU outputs"
                                                               : "each block's forward in backward")
        << " brings activations to " << b(c.activation_bytes) << " and " << c.strategy << " to " << b(c.total_bytes())
        << " per rank, for " << ms(c.recompute_s) << " ms more compute per step (+"
        << std::round(100 * c.recompute_s / (c.step_s - c.recompute_s)) << "% step time). Predicted step " << ms(c.step_s)
        << " ms";
    why << tie_clause(r, chosen) << ". Set model.recompute = \"" << recompute_name(*lever) << "\" in the deck.";
    r.reason = why.str();
    return r;
  }
  const StrategyPrediction& c = r.rows[chosen];
  // What the choice is compared with: the other strategies with the same split and recomputation.
  const auto find = [&](StrategyKind s) -> const StrategyPrediction* {
    for (const auto& row : r.rows)
      if (row.strategy == s && row.tensor == c.tensor && row.pipeline == c.pipeline && row.recompute == c.recompute)
        return &row;
    return nullptr;
  };
  const std::string tie = tie_clause(r, chosen);
  if (c.pipeline > 1) {
    r.reason = pipeline_reason(r, chosen, m) + tie + ".";
    return r;
  }
  if (c.tensor > 1) {
    // Tensor parallelism was planned because whole layers do not fit or cannot split the batch,
    // or because the deck asks for it.
    // The fastest whole-layer row that fits, else the smallest.
    const StrategyPrediction* whole =
        best_row(r.rows, [](const StrategyPrediction& row) { return row.tensor == 1 && row.pipeline == 1; });
    const bool nvlink = c.tensor <= m.fast_group && m.fast_link.starts_with("NV");
    std::ostringstream why;
    why << c.strategy << (c.strategy == StrategyKind::hsdp ? " in groups of " + std::to_string(c.group) : "")
        << " over " << m.world() / c.tensor << " data-parallel rank(s), with parallel.tensor = " << c.tensor
        << ": each layer split over " << c.tensor << " consecutive GPUs ";
    if (nvlink)
      why << "inside an NVLink group (" << m.fast_link << ", ~" << m.fast_gbps << " GB/s). ";
    else
      why << "across " << (c.tensor <= m.fast_group ? m.fast_link : m.node_link)
          << " links, as the deck's parallel.tensor asks. ";
    if (whole && whole->fits)
      why << "With whole layers the fastest, " << whole->strategy << ", is predicted " << ms(whole->step_s)
          << " ms, slower than this split. ";
    else if (whole)
      why << "With whole layers nothing fits: the smallest, " << whole->strategy << ", needs " << b(whole->total_bytes())
          << " per rank (activations " << b(whole->activation_bytes) << "), over the " << limit << ". ";
    else
      why << "With whole layers the " << m.world() << " ranks cannot split the global batch of "
          << config.data.global_batch << " sequences. ";
    why << "Split, a rank holds " << b(c.total_bytes()) << " (activations " << b(c.activation_bytes) << ", model state "
        << b(c.state_bytes) << "); the layers' slices exchange " << b(c.tensor_bytes)
        << " per rank per step inside the group, predicted " << ms(c.tensor_s)
        << " ms and not hidden behind compute. Predicted step " << ms(c.step_s) << " ms (compute " << ms(c.compute_s)
        << ", exposed communication " << ms(c.exposed_s) << ")" << tie << ".";
    r.reason = why.str();
    return r;
  }
  const StrategyPrediction* ddp = find(StrategyKind::ddp);
  const StrategyPrediction* zero2 = find(StrategyKind::zero2);
  const StrategyPrediction* zero3 = find(StrategyKind::zero3);
  // Bytes against ddp's, as the reasons print them: "8.5x ddp's", or "as much as ddp" when the
  // printed ratio would be 1.0.
  const auto against_ddp = [&](const StrategyPrediction& p) -> std::string {
    if (!ddp || sent(*ddp) == 0) return "";
    const std::string ratio = times(static_cast<double>(sent(p)) / static_cast<double>(sent(*ddp)));
    return ratio == "1.0x" ? "as much as ddp" : ratio + " ddp's";
  };
  // Communication compute hides (exposed time is the rest): "12.5 of its 13.0 ms hidden behind compute".
  const auto hidden = [](const StrategyPrediction& p) {
    return ms(std::max(0.0, p.comm_s - p.exposed_s)) + " of its " + ms(p.comm_s) +
           " ms of communication hidden behind compute";
  };
  std::ostringstream why;
  why << c.strategy << (c.strategy == StrategyKind::hsdp ? " with groups of " + std::to_string(c.group) : "") << ": ";
  if (c.strategy == StrategyKind::ddp && sent(c) == 0) {
    why << "the whole model state (" << b(c.state_bytes) << ") fits in " << limit
        << "; on one rank no strategy sends anything or holds less, and ddp keeps the model in one piece";
  } else if (c.strategy == StrategyKind::ddp) {
    const bool least = std::none_of(r.rows.begin(), r.rows.end(), [&](const StrategyPrediction& p) {
      return p.fits && p.tensor == c.tensor && p.pipeline == c.pipeline && sent(p) < sent(c);
    });
    why << "the whole model state (" << b(c.state_bytes) << " per rank) fits in " << limit << ", and ddp sends "
        << (least ? "the least per step (" + b(sent(c)) + ")" : b(sent(c)) + " per step") << ", its all-reduce "
        << (config.parallel.overlap ? "overlapping backward" : "after backward (parallel.overlap = false)");
    if (zero3) {
      const double ratio = static_cast<double>(sent(*zero3)) / static_cast<double>(sent(c));
      why << "; zero3 would hold " << b(zero3->total_bytes()) << " instead of " << b(c.total_bytes())
          << (ratio > 1 ? " but send " : " and send ") << b(sent(*zero3)) << ", " << times(ratio) << " as much";
    }
  } else if (c.strategy == StrategyKind::hsdp) {
    why << "it shards inside the fast groups (" << m.fast_link << ", ~" << m.fast_gbps << " GB/s) and sends "
        << b(c.slow_bytes) << " per step across the " << c.slow_level << " (~"
        << (c.slow_level == "network" ? m.inter_node_gbps : m.node_gbps) << " GB/s)";
    if (zero3 && zero3->slow_level == c.slow_level && zero3->slow_bytes > 0)
      why << ", where zero3 over all ranks sends " << b(zero3->slow_bytes) << " through it ("
          << times(static_cast<double>(zero3->slow_bytes) / static_cast<double>(std::max<std::uint64_t>(c.slow_bytes, 1)))
          << " as much)";
    if (ddp && !ddp->fits) why << "; ddp does not fit (" << b(ddp->total_bytes()) << ")";
  } else {
    if (ddp && !ddp->fits) why << "ddp does not fit (it needs " << b(ddp->total_bytes()) << " per rank, over the " << limit << "); ";
    if (ddp && ddp->fits)
      why << "ddp fits too but is predicted " << ms(ddp->step_s) << " ms (exposed communication " << ms(ddp->exposed_s)
          << "); ";
    if (c.strategy == StrategyKind::zero3 && zero2 && !zero2->fits) why << "neither does zero2 (" << b(zero2->total_bytes()) << "); ";
    const std::string relative = against_ddp(c);
    if (c.strategy == StrategyKind::zero3)
      why << "zero3 shards everything to " << b(c.total_bytes()) << " per rank, sending " << b(sent(c)) << " per step"
          << (relative.empty() ? "" : " (" + relative + ")") << ", " << hidden(c);
    else
      why << c.strategy << " shards the optimizer state" << (c.strategy == StrategyKind::zero2 ? " and gradients" : "")
          << " to " << b(c.total_bytes()) << " per rank, sending " << b(sent(c)) << " per step"
          << (relative.empty() ? "" : " (" + relative + ")");
  }
  why << ". Predicted step " << ms(c.step_s) << " ms (compute " << ms(c.compute_s) << ", exposed communication "
      << ms(c.exposed_s) << ")" << tie;
  if (chosen == 0)
    for (int i = 0; i < static_cast<int>(r.rows.size()); ++i)
      if (i != chosen && r.rows[i].fits) {
        why << "; next " << r.rows[i].strategy << " " << ms(r.rows[i].step_s) << " ms";
        break;
      }
  why << ".";
  r.reason = why.str();
  return r;
}

std::string format_plan(const PlanResult& r, const Machine& m) {
  std::ostringstream out;
  out << "machine: " << m.description << "\n";
  out << "memory per rank: " << format_bytes(m.memory_per_rank) << " (" << m.memory_source << "); compute "
      << std::round(m.flops_per_rank / 1e9) << " GFLOP/s per rank (" << m.flops_source << ")\n";
  out << "links: fast groups of " << m.fast_group << " (" << m.fast_link << ", " << m.fast_gbps << " GB/s)";
  if (m.fast_group < m.ranks_per_node) out << ", between groups " << m.node_link << " (" << m.node_gbps << " GB/s)";
  if (m.nodes > 1) out << ", between nodes " << m.inter_node_gbps << " GB/s";
  out << "\n";
  for (const auto& a : m.assumptions) out << "assumed: " << a << "\n";
  char line[320];
  std::snprintf(line, sizeof line, "%-5s %-8s %6s %4s %6s %-9s %11s %11s %11s %11s %5s %10s %10s %10s %10s\n", "rank",
                "strategy", "tensor", "pipe", "group", "recompute", "state", "activations", "workspace", "total", "fits", "compute ms",
                "comm ms", "exposed ms", "step ms");
  out << line;
  int place = 0;
  bool each_micro_batch = false;
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const auto& p = r.rows[i];
    const std::string rank = p.fits ? std::to_string(++place) : "-";
    each_micro_batch = each_micro_batch || p.reduces_each_micro_batch;
    const std::string strategy = name_of(p.strategy) + (p.reduces_each_micro_batch ? "*" : "");
    // The stages, and with interleaving the chunks a stage: "8x2".
    const std::string pipe = std::to_string(p.pipeline) +
                             (p.virtual_stages > 1 ? "x" + std::to_string(p.virtual_stages) : "") +
                             (p.stage_blocks.empty() ? "" : "m");
    std::snprintf(line, sizeof line, "%-5s %-8s %6d %4s %6d %-9s %11s %11s %11s %11s %5s %10s %10s %10s %10s%s\n",
                  rank.c_str(), strategy.c_str(), p.tensor, pipe.c_str(), p.group, recompute_name(p.recompute), format_bytes(static_cast<double>(p.state_bytes)).c_str(),
                  format_bytes(static_cast<double>(p.activation_bytes)).c_str(),
                  format_bytes(static_cast<double>(p.workspace_bytes)).c_str(),
                  format_bytes(static_cast<double>(p.total_bytes())).c_str(), p.fits ? "yes" : "NO",
                  ms(p.compute_s).c_str(), ms(p.comm_s).c_str(), ms(p.exposed_s).c_str(), ms(p.step_s).c_str(),
                  static_cast<int>(i) == r.chosen ? "  <- chosen" : "");
    out << line;
  }
  if (each_micro_batch)
    out << "*: gradients reduce-scattered every micro-batch, holding no whole-model gradient "
           "(parallel.grad_reduction; \"auto\" where one would not fit)\n";
  if (std::any_of(r.rows.begin(), r.rows.end(), [](const StrategyPrediction& p) { return p.pipeline > 1; }))
    out << "pipe: stages of consecutive blocks (parallel.pipeline), the strategy within each stage (P x V: "
           "interleaved 1F1B, V chunks a stage; m: cut by memory, where cut by FLOPs a stage would not fit); a "
           "pipelined row's memory is its fullest stage's, its traffic its stage's with the most parameters, compute "
           "with the bubble, comm with the activations between stages\n";
  for (const auto& n : r.notes) out << "note: " << n << "\n";
  out << (r.chosen >= 0 ? "recommendation: " : "no recommendation: ") << r.reason << "\n";
  return out.str();
}

}  // namespace st
