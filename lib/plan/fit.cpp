#include "plan/fit.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.hpp"
#include "core/text.hpp"
#include "data/batches.hpp"
#include "deck/parse.hpp"
#include "model/deck_shape.hpp"
#include "parallel/deck_plan.hpp"
#include "plan/planner.hpp"

namespace st {

ParallelPlan deck_plan(const Config& config, const Machine& machine) {
  const int tensor = static_cast<int>(config.parallel.tensor);
  const BatchPlan batches =
      plan_batches(config.data, config.model.seq_len, deck_data_ranks(config, machine.world()), config.deck_path);
  const ModelShape shape = model_shape(config.model);
  const int stages = static_cast<int>(config.parallel.pipeline);
  if (stages == 1)
    return st::deck_plan(config, make_layout(shape, TensorSplit{tensor, 0}), machine.world(), machine.ranks_per_node,
                         batches.accum_steps, batches.micro_batch);
  // A pipeline's first stage: its chunks' parts of the model over its ranks.
  const int stage_world = std::max(1, machine.world() / stages);
  const PipelineShape pipeline = deck_pipeline_shape(config, batches.accum_steps);
  const std::vector<ModelPart> first = pipeline_stage_parts(shape, pipeline, 0);
  return st::deck_plan(config, stage_layout(shape, TensorSplit{tensor, 0}, first), stage_world,
                       std::min(machine.ranks_per_node, stage_world), batches.accum_steps, batches.micro_batch, first);
}

namespace {

// hsdp's shard group on the machine, in data-parallel ranks (0 for the other strategies).
int deck_shard_group(const Config& config, const Machine& m) {
  const int tensor = static_cast<int>(config.parallel.tensor);
  return config.parallel.strategy == StrategyKind::hsdp
             ? deck_mesh(config, m.world() / tensor, std::max(1, m.ranks_per_node / tensor)).shards
             : 0;
}

}  // namespace

void resolve_grad_reduction(Config& config, const Machine& m) {
  if (config.parallel.grad_reduction != GradReduction::automatic) return;
  deck_pipeline_degree(config, m.world());
  deck_tensor_degree(config, m.world(), m.ranks_per_node, true);
  const int tensor = static_cast<int>(config.parallel.tensor);
  const StrategyPrediction p =
      predict_strategy(config, m, config.parallel.strategy, deck_shard_group(config, m), std::nullopt, tensor);
  const BatchPlan batches =
      plan_batches(config.data, config.model.seq_len, deck_data_ranks(config, m.world()), config.deck_path);
  const bool accumulates_sharded = zero_stage(config.parallel.strategy) >= 2 && batches.accum_steps > 1;
  const std::string why = !accumulates_sharded    ? "auto: nothing to choose (no sharded gradient accumulates)"
                          : p.reduces_each_micro_batch ? "auto: a whole-model gradient would not fit"
                                                       : "auto: the whole-model gradient fits";
  set_key(config, "parallel.grad_reduction", name_of(p.grad_reduction), why);
}

void check_memory_fits(const Config& config, const Machine& m) {
  // The tensor groups first: a degree the ranks or the model cannot split is refused, naming
  // parallel.tensor (and the pipeline's, parallel.pipeline), before anything is predicted for it.
  deck_pipeline_degree(config, m.world());
  deck_tensor_degree(config, m.world(), m.ranks_per_node, true);
  const StrategyKind strategy = config.parallel.strategy;
  const int tensor = static_cast<int>(config.parallel.tensor);
  const int group = deck_shard_group(config, m);
  const StrategyPrediction p = predict_strategy(config, m, strategy, group, std::nullopt, tensor);
  if (p.fits) return;
  auto b = [](std::uint64_t x) { return format_bytes(static_cast<double>(x)); };
  // What would fit: each strategy on this many ranks, else on more nodes like these.
  // On these ranks, with more recomputation than the deck asks for.
  // A pipeline cut by FLOPs (the deck leaving parallel.stage_blocks empty) that overfills a stage
  // may fit cut by memory.
  std::string by_memory;
  if (const StrategyPrediction q =
          predict_strategy(config, m, strategy, group, std::nullopt, tensor, PipelineCut::memory_where_needed);
      q.fits && !q.stage_blocks.empty()) {
    char steps[96];
    std::snprintf(steps, sizeof steps, "predicted step %.4g ms against %.4g ms cut by FLOPs", q.step_s * 1e3,
                  p.step_s * 1e3);
    by_memory = "Cut by memory it fits: parallel.stage_blocks = " + stage_blocks_text(q.stage_blocks) + " gives the fuller stages fewer blocks (" +
                b(q.total_bytes()) + " per rank on the fullest stage, " + steps + "). ";
  }
  std::string with_recompute;
  for (const Recompute stronger : {Recompute::selective, Recompute::full}) {
    if (stronger <= p.recompute) continue;
    const StrategyPrediction q = predict_strategy(config, m, strategy, group, stronger, tensor);
    if (!q.fits) continue;
    with_recompute = "On these ranks it fits with model.recompute = \"" + std::string(recompute_name(stronger)) +
                     "\": " + b(q.total_bytes()) + " per rank (activations " + b(q.activation_bytes) + "), +" +
                     std::to_string(static_cast<int>(std::lround(100 * q.recompute_s / (q.step_s - q.recompute_s)))) +
                     "% predicted step time. ";
    break;
  }
  std::vector<std::string> fits;
  int largest_split = 0;  // the most ranks the global batch was found to split over
  for (const StrategyKind s : {StrategyKind::ddp, StrategyKind::zero1, StrategyKind::zero2, StrategyKind::zero3}) {
    for (int factor = 1; factor <= 64; factor *= 2) {
      Machine more = m;
      more.nodes = m.nodes * factor;
      try {
        const StrategyPrediction q = predict_strategy(config, more, s, 0, std::nullopt, tensor);
        largest_split = std::max(largest_split, more.world());
        if (q.fits) {
          fits.push_back(name_of(s) + " on " + std::to_string(more.world()) + " rank(s) (" + b(q.total_bytes()) + ")");
          break;
        }
      } catch (const Error&) {
        // The global batch does not split over that many ranks: try more.
      }
    }
  }
  std::string message = config.deck_path + ": parallel.strategy = \"" + name_of(strategy) + "\" on " +
                        std::to_string(m.world()) + " rank(s) needs " + b(p.total_bytes()) +
                        " per rank (model state " + b(p.state_bytes) + ", activations " + b(p.activation_bytes) +
                        ", workspace " + b(p.workspace_bytes) + "), more than the " +
                        format_bytes(m.memory_per_rank) + " per rank available (" + m.memory_source + "). " +
                        by_memory + with_recompute;
  const std::string without = with_recompute.empty() && by_memory.empty() ? "" : "Otherwise, ";
  if (fits.empty())
    message += without + (without.empty() ? "Nothing" : "nothing") + " fits on up to " + std::to_string(largest_split) + " ranks of nodes like these" +
               (largest_split < m.world() * 64
                    ? " (data.global_batch = " + std::to_string(config.data.global_batch) + " does not split over more)"
                    : std::string()) +
               ": make the model smaller, use parallel.precision = \"bf16\", lower data.micro_batch, or raise "
               "data.global_batch to spread it over more ranks.";
  else
    message += without + (without.empty() ? "It" : "it") + " would fit with " + join(fits, "; ") + " (" + std::to_string(m.ranks_per_node) +
               " rank(s) per node of this size).";
  throw Error(message, ErrorScope::all_ranks);
}

std::string resolve_auto_strategy(Config& config, const Machine& machine) {
  const PlanResult plan = plan_strategies(config, machine);
  const std::string table = format_plan(plan, machine);
  // Recomputation costs compute: the planner recommends it, the deck decides.
  if (plan.chosen < 0 || plan.recompute)
    throw Error(config.deck_path + ": parallel.strategy = \"auto\": " + plan.reason, ErrorScope::all_ranks);
  const StrategyPrediction* chosen = &plan.rows[static_cast<std::size_t>(plan.chosen)];
  std::string origin = "auto: chosen by the planner (plan.txt)";
  if (chosen->pipeline > 1 && machine.gpu) {
    // On GPUs a pipeline's messages go through host memory in this version, at a cost the
    // planner does not time: the planner's pick among the rows without one, where one fits.
    const int flat_row = choose_row(plan.rows, 1);
    const std::string why = "the planner's choice, parallel.pipeline = " + std::to_string(chosen->pipeline) +
                            ", would pass activations between GPUs through host memory in this version, which the "
                            "planner does not time";
    if (flat_row >= 0) {
      chosen = &plan.rows[static_cast<std::size_t>(flat_row)];
      origin = "auto: chosen by the planner (plan.txt) without a pipeline (" + why + ")";
    } else {
      origin = "auto: chosen by the planner (plan.txt); nothing fits without a pipeline, whose messages between "
               "GPUs go through host memory in this version (a cost the planner does not time)";
    }
  }
  set_key(config, "parallel.strategy", name_of(chosen->strategy), origin);
  // The chosen row's split replaces the deck's wherever they differ (a deck's own pipeline or
  // tensor degree is planned beside the rows without them, which may win).
  // (A deck without a pipeline keeps its other pipeline keys: the run refuses chunks without stages.)
  if (chosen->pipeline != config.parallel.pipeline ||
      (chosen->pipeline > 1 && chosen->virtual_stages != config.parallel.virtual_stages)) {
    if (chosen->pipeline != config.parallel.pipeline)
      set_key(config, "parallel.pipeline", std::int64_t{chosen->pipeline},
              chosen->pipeline > 1 ? "auto: the planner puts stages of consecutive blocks on whole nodes"
                                   : "auto: the planner's choice runs without a pipeline");
    // The planner's own pipelines are 1f1b with one chunk a stage, or interleaved with two, cut
    // by FLOPs, or by memory where that would overfill a stage (below).
    const std::string why = "auto: goes with the planner's parallel.pipeline";
    const bool interleaved = chosen->virtual_stages > 1;
    if (config.parallel.virtual_stages != chosen->virtual_stages)
      set_key(config, "parallel.virtual_stages", std::int64_t{chosen->virtual_stages}, why);
    const PipelineSchedule schedule = interleaved ? PipelineSchedule::interleaved : PipelineSchedule::one_f_one_b;
    if (config.parallel.pipeline_schedule != schedule)
      set_key(config, "parallel.pipeline_schedule", name_of(schedule), why);
    if (!config.parallel.stage_blocks.empty() && chosen->stage_blocks.empty())
      set_key(config, "parallel.stage_blocks", std::vector<std::int64_t>{}, why);
  }
  // A cut by memory goes into the deck (the run cuts by FLOPs where it is not given).
  if (chosen->pipeline > 1 && !chosen->stage_blocks.empty() && chosen->stage_blocks != config.parallel.stage_blocks)
    set_key(config, "parallel.stage_blocks", chosen->stage_blocks,
            "auto: the planner's cut by memory (cut by FLOPs a stage would not fit)");
  if (chosen->pipeline > 1 && config.run.sample_every > 0)
    set_key(config, "run.sample_every", std::int64_t{0},
            "auto: a pipeline's stages hold the model in parts (generate from the checkpoint)");
  if (chosen->tensor != config.parallel.tensor)
    set_key(config, "parallel.tensor", std::int64_t{chosen->tensor},
            chosen->tensor > 1 ? "auto: the planner splits layers inside the NVLink group"
                               : "auto: the planner's choice keeps whole layers");
  if (chosen->strategy == StrategyKind::hsdp)
    set_key(config, "parallel.shard_group", std::int64_t{chosen->group}, "auto: the planner's fast-link group");
  return table;
}


std::vector<std::string> fit_parallel_settings(Config& config, const World& world) {
  ParallelConfig& p = config.parallel;
  if (p.strategy == StrategyKind::automatic) p.strategy = world.size() > 1 ? StrategyKind::zero3 : StrategyKind::ddp;
  std::vector<std::string> notes;
  const std::string& nodes_from = config.origin["parallel.ranks_per_node"];
  if (p.ranks_per_node > 0 && world.size() % p.ranks_per_node != 0 && nodes_from != "--set" &&
      nodes_from != "default") {
    notes.push_back("parallel.ranks_per_node = " + std::to_string(p.ranks_per_node) + " (" + nodes_from +
                    ") does not divide this job's " + std::to_string(world.size()) +
                    " rank(s): the ranks are grouped by their real nodes");
    p.ranks_per_node = 0;
  }
  const std::string& group_from = config.origin["parallel.shard_group"];
  // The mesh hsdp's group would form on this job (make_mesh refuses a group that does not divide it).
  const auto group_fits = [&] {
    try {
      make_mesh(p.strategy, p.shard_group, world.size(), world.local_size(), config.deck_path);
      return true;
    } catch (const Error&) {
      return false;
    }
  };
  if (p.strategy == StrategyKind::hsdp && p.shard_group > 0 && group_from != "--set" && !group_fits()) {
    notes.push_back("parallel.strategy = \"hsdp\" in groups of parallel.shard_group = " + std::to_string(p.shard_group) +
                    " (" + group_from + ") does not fit this job's " + std::to_string(world.size()) +
                    " rank(s): zero3 is used instead");
    p.strategy = StrategyKind::zero3;
    p.shard_group = 0;
  }
  return notes;
}

// Any divisor of the degree splits the model, since the degree split its heads and vocabulary. A
// degree given with --set is this job's own, and deck_tensor_degree refuses it instead when it
// does not fit.
std::string fit_tensor_degree(Config& config, const World& world) {
  ParallelConfig& p = config.parallel;
  const std::string& from = config.origin["parallel.tensor"];
  if (p.tensor <= 1 || from == "--set") return "";
  std::int64_t fits = p.tensor;
  while (fits > 1 &&
         (p.tensor % fits != 0 || world.size() % fits != 0 || world.local_size() % fits != 0 || !world.uniform()))
    --fits;
  if (fits == p.tensor) return "";
  const std::string note = "the model was trained with parallel.tensor = " + std::to_string(p.tensor) +
                           ", which does not fit this job's " + std::to_string(world.size()) + " rank(s) (" +
                           std::to_string(world.local_size()) + " per node): " +
                           (fits == 1 ? std::string("every rank holds whole layers")
                                      : "layers are split over " + std::to_string(fits) + " ranks");
  p.tensor = fits;
  if (fits == 1) p.sequence_parallel = false;
  return note;
}

}  // namespace st
