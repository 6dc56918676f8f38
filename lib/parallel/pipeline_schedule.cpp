#include "parallel/pipeline_schedule.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include "core/error.hpp"

namespace st {

namespace {

using Pass = PipelineAction::Pass;

// PipeDream-Flush on one chunk per stage: fill, steady one forward and one backward, drain.
std::vector<PipelineAction> one_f_one_b(const PipelineShape& shape, int stage) {
  const int m = shape.micro_batches;
  const int warmup = std::min(shape.stages - stage - 1, m);
  std::vector<PipelineAction> actions;
  for (int i = 0; i < warmup; ++i) actions.push_back({Pass::forward, i, 0});
  for (int i = 0; i < m - warmup; ++i) {
    actions.push_back({Pass::forward, warmup + i, 0});
    actions.push_back({Pass::backward, i, 0});
  }
  for (int i = m - warmup; i < m; ++i) actions.push_back({Pass::backward, i, 0});
  return actions;
}

std::vector<PipelineAction> gpipe(const PipelineShape& shape) {
  std::vector<PipelineAction> actions;
  for (int i = 0; i < shape.micro_batches; ++i) actions.push_back({Pass::forward, i, 0});
  for (int i = 0; i < shape.micro_batches; ++i) actions.push_back({Pass::backward, i, 0});
  return actions;
}

// Megatron-LM's interleaved 1F1B (schedules.py, forward_backward_pipelining_with_interleaving):
// the k-th chunk pass of a rank takes micro-batches in groups of P, each group through chunk 0,
// then chunk 1, ...; backwards take the chunks in the reverse order. A deeper warm-up lets the
// rank's later chunks start before the first micro-batches come back.
std::vector<PipelineAction> interleaved(const PipelineShape& shape, int stage) {
  const int P = shape.stages, V = shape.virtual_stages, total = shape.micro_batches * V;
  auto action = [&](int k, Pass pass) {
    const int in_group = k % (P * V);
    const int chunk = in_group / P;
    return PipelineAction{pass, k / (P * V) * P + k % P, pass == Pass::forward ? chunk : V - 1 - chunk};
  };
  const int warmup = shape.micro_batches == P ? total : std::min((P - stage - 1) * 2 + (V - 1) * P, total);
  std::vector<PipelineAction> actions;
  for (int k = 0; k < warmup; ++k) actions.push_back(action(k, Pass::forward));
  for (int i = 0; i < total - warmup; ++i) {
    actions.push_back(action(warmup + i, Pass::forward));
    actions.push_back(action(i, Pass::backward));
  }
  for (int k = total - warmup; k < total; ++k) actions.push_back(action(k, Pass::backward));
  return actions;
}

}  // namespace

std::string pipeline_schedule_problem(PipelineSchedule schedule, const PipelineShape& shape) {
  if (shape.stages < 1) return "parallel.pipeline must be at least 1";
  if (shape.micro_batches < 1) return "a step needs at least one micro-batch";
  if (schedule != PipelineSchedule::interleaved) {
    if (shape.virtual_stages != 1)
      return "parallel.virtual_stages = " + std::to_string(shape.virtual_stages) + " needs parallel.pipeline_schedule = "
             "\"interleaved\" (\"" + name_of(schedule) + "\" runs one model chunk per stage)";
    return "";
  }
  if (shape.virtual_stages < 2)
    return "parallel.pipeline_schedule = \"interleaved\" needs parallel.virtual_stages >= 2 (it is " +
           std::to_string(shape.virtual_stages) + "; with one chunk per stage use \"1f1b\")";
  if (shape.micro_batches % shape.stages != 0)
    return "parallel.pipeline_schedule = \"interleaved\" needs the micro-batches per step (" +
           std::to_string(shape.micro_batches) + ") to be a multiple of parallel.pipeline (" +
           std::to_string(shape.stages) + ")";
  return "";
}

std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, const PipelineShape& shape, int stage) {
  if (const std::string problem = pipeline_schedule_problem(schedule, shape); !problem.empty()) throw Error(problem);
  ST_REQUIRE(stage >= 0 && stage < shape.stages, "pipeline stage outside the pipeline");
  switch (schedule) {
    case PipelineSchedule::gpipe: return gpipe(shape);
    case PipelineSchedule::one_f_one_b: return one_f_one_b(shape, stage);
    case PipelineSchedule::interleaved: return interleaved(shape, stage);
  }
  return {};
}

int pipeline_peak_in_flight(PipelineSchedule schedule, const PipelineShape& shape, int stage) {
  int in_flight = 0, peak = 0;
  for (const PipelineAction& a : pipeline_actions(schedule, shape, stage)) {
    in_flight += a.pass == Pass::forward ? 1 : -1;
    peak = std::max(peak, in_flight);
  }
  return peak;
}

int pipeline_chunk_in_flight(PipelineSchedule schedule, const PipelineShape& shape, int stage, int chunk) {
  int in_flight = 0, peak = 0;
  for (const PipelineAction& a : pipeline_actions(schedule, shape, stage))
    if (a.chunk == chunk) peak = std::max(peak, in_flight += a.pass == Pass::forward ? 1 : -1);
  return peak;
}

PipelineTiming simulate_pipeline(PipelineSchedule schedule, const PipelineShape& shape, double forward,
                                 double backward) {
  const int P = shape.stages, last_virtual = shape.chunks() - 1;
  std::vector<std::vector<PipelineAction>> lists;
  for (int s = 0; s < P; ++s) lists.push_back(pipeline_actions(schedule, shape, s));
  // When each (pass, micro-batch, virtual stage) finished.
  std::map<std::tuple<Pass, int, int>, double> done;
  std::vector<std::size_t> next(static_cast<std::size_t>(P), 0);
  std::vector<double> free_at(static_cast<std::size_t>(P), 0);
  PipelineTiming timing;
  for (int s = 0; s < P; ++s) timing.peak_in_flight.push_back(pipeline_peak_in_flight(schedule, shape, s));
  // Each stage runs its list in order; a pass starts once its input exists: a forward the
  // previous virtual stage's output, a backward the next virtual stage's input gradient (the
  // last virtual stage its own forward's loss). Passes are taken as their inputs appear, so the
  // finish times do not depend on the order the stages are visited in.
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < P; ++s) {
      auto& at = next[static_cast<std::size_t>(s)];
      while (at < lists[static_cast<std::size_t>(s)].size()) {
        const PipelineAction& a = lists[static_cast<std::size_t>(s)][at];
        const int v = a.virtual_stage(shape, s);
        std::tuple<Pass, int, int> needs;
        bool has_input = true;
        if (a.pass == Pass::forward) {
          has_input = v > 0;
          needs = {Pass::forward, a.micro, v - 1};
        } else {
          needs = v == last_virtual ? std::tuple{Pass::forward, a.micro, v} : std::tuple{Pass::backward, a.micro, v + 1};
        }
        double ready = 0;
        if (has_input) {
          const auto found = done.find(needs);
          if (found == done.end()) break;
          ready = found->second;
        }
        double& free = free_at[static_cast<std::size_t>(s)];
        free = std::max(free, ready) + (a.pass == Pass::forward ? forward : backward);
        done[{a.pass, a.micro, v}] = free;
        ++at;
        progress = true;
      }
    }
  }
  for (int s = 0; s < P; ++s)
    if (next[static_cast<std::size_t>(s)] != lists[static_cast<std::size_t>(s)].size())
      throw Error("pipeline schedule \"" + name_of(schedule) + "\" deadlocks: stage " + std::to_string(s) +
                  " waits for an input that is never sent");
  timing.makespan = *std::max_element(free_at.begin(), free_at.end());
  return timing;
}

std::string stage_blocks_problem(const ModelShape& shape, int chunks, const std::vector<std::int64_t>& blocks) {
  if (blocks.empty()) return "";
  std::int64_t sum = 0;
  for (const std::int64_t b : blocks) sum += b;
  if (static_cast<int>(blocks.size()) == chunks && sum == shape.n_layer &&
      std::all_of(blocks.begin(), blocks.end(), [](std::int64_t b) { return b >= 1; }))
    return "";
  return "parallel.stage_blocks gives " + std::to_string(blocks.size()) + " chunk(s) " + std::to_string(sum) +
         " block(s); it needs parallel.pipeline x parallel.virtual_stages = " + std::to_string(chunks) +
         " numbers of at least 1 adding up to model.n_layer = " + std::to_string(shape.n_layer) +
         " (or [] to balance them by FLOPs)";
}

namespace {

// Blocks per part, balanced by FLOPs (pipeline_parts, capped_balanced_blocks): first the
// smallest largest part's cost that any cut within the caps reaches, then among the cuts within
// it the one with the least sum of squared costs. Both by dynamic programming over (parts,
// blocks): exact, and cheap at any depth a model has (parts x blocks^2). `most` (empty: no caps):
// the most blocks each part may take; `least`: the fewest. Empty where no cut keeps within them.
std::vector<std::int64_t> balanced_blocks(const ModelShape& shape, int chunks, const std::vector<std::int64_t>& most = {},
                                          std::int64_t least = 1) {
  const auto n = static_cast<int>(shape.n_layer);
  const double block = block_train_flops_per_token(shape), head = head_train_flops_per_token(shape);
  constexpr double kNone = std::numeric_limits<double>::infinity();
  // Part k of `chunks` holding blocks [i, j): its cost, in blocks' worth to keep sums exact
  // enough; kNone over its cap.
  const auto cost = [&](int k, int i, int j) {
    if (j - i < least || (!most.empty() && j - i > most[static_cast<std::size_t>(k)])) return kNone;
    return (j - i) + (k == chunks - 1 ? head / block : 0.0);
  };
  // Minimal largest cost over cuts of the first j blocks into k parts.
  std::vector<std::vector<double>> worst(static_cast<std::size_t>(chunks) + 1,
                                         std::vector<double>(static_cast<std::size_t>(n) + 1, kNone));
  worst[0][0] = 0;
  for (int k = 1; k <= chunks; ++k)
    for (int j = k; j <= n; ++j)
      for (int i = k - 1; i < j; ++i)
        worst[k][j] = std::min(worst[k][j], std::max(worst[k - 1][i], cost(k - 1, i, j)));
  if (worst[chunks][n] == kNone) return {};
  const double limit = worst[chunks][n] * (1 + 1e-12);
  // Least sum of squares within that limit; `from` remembers each part's first block.
  std::vector<std::vector<double>> squares(static_cast<std::size_t>(chunks) + 1,
                                           std::vector<double>(static_cast<std::size_t>(n) + 1, kNone));
  std::vector<std::vector<int>> from(static_cast<std::size_t>(chunks) + 1, std::vector<int>(static_cast<std::size_t>(n) + 1, 0));
  squares[0][0] = 0;
  for (int k = 1; k <= chunks; ++k)
    for (int j = k; j <= n; ++j)
      // Later starts first, so that on a tie the earlier parts keep the larger share.
      for (int i = j - 1; i >= k - 1; --i) {
        const double c = cost(k - 1, i, j);
        if (c > limit || squares[k - 1][i] == kNone) continue;
        const double total = squares[k - 1][i] + c * c;
        if (total < squares[k][j] * (1 - 1e-12)) {
          squares[k][j] = total;
          from[k][j] = i;
        }
      }
  std::vector<std::int64_t> blocks(static_cast<std::size_t>(chunks));
  for (int k = chunks, j = n; k > 0; j = from[k][j], --k) blocks[static_cast<std::size_t>(k - 1)] = j - from[k][j];
  return blocks;
}

}  // namespace

std::vector<ModelPart> pipeline_parts(const ModelShape& shape, int chunks, const std::vector<std::int64_t>& blocks) {
  ST_REQUIRE(chunks >= 1, "a pipeline of no parts");
  if (shape.n_layer < chunks)
    throw Error("a pipeline of " + std::to_string(chunks) + " model chunks needs at least as many blocks (model.n_layer = " +
                std::to_string(shape.n_layer) + ")");
  if (const std::string problem = stage_blocks_problem(shape, chunks, blocks); !problem.empty()) throw Error(problem);
  const std::vector<std::int64_t> counts = blocks.empty() ? balanced_blocks(shape, chunks) : blocks;
  std::vector<ModelPart> parts;
  std::int64_t first = 0;
  for (const std::int64_t count : counts) {
    parts.push_back({first, first + count});
    first += count;
  }
  return parts;
}

std::vector<std::int64_t> capped_balanced_blocks(const ModelShape& shape, const std::vector<std::int64_t>& most,
                                                 std::int64_t least) {
  const auto chunks = static_cast<int>(most.size());
  ST_REQUIRE(chunks >= 1, "a pipeline of no parts");
  ST_REQUIRE(least >= 1, "a pipeline part of no blocks");
  return balanced_blocks(shape, chunks, most, least);
}

std::vector<std::int64_t> chunk_blocks(const std::vector<std::int64_t>& stage_totals, int virtual_stages) {
  const auto stages = static_cast<int>(stage_totals.size());
  std::vector<std::int64_t> blocks(static_cast<std::size_t>(stages * virtual_stages));
  for (int s = 0; s < stages; ++s)
    for (int c = 0; c < virtual_stages; ++c) {
      const std::int64_t total = stage_totals[static_cast<std::size_t>(s)];
      blocks[static_cast<std::size_t>(c * stages + s)] = total / virtual_stages + (c < total % virtual_stages ? 1 : 0);
    }
  return blocks;
}

std::vector<ModelPart> pipeline_stage_parts(const ModelShape& shape, const PipelineShape& pipeline, int stage) {
  return pipeline_stage_parts(pipeline_parts(shape, pipeline.chunks(), pipeline.blocks), pipeline, stage);
}

std::vector<ModelPart> pipeline_stage_parts(const std::vector<ModelPart>& parts, const PipelineShape& pipeline, int stage) {
  ST_REQUIRE(static_cast<int>(parts.size()) == pipeline.chunks() && stage >= 0 && stage < pipeline.stages,
             "a stage's parts of another pipeline");
  std::vector<ModelPart> held;
  for (int c = 0; c < pipeline.virtual_stages; ++c) held.push_back(parts[static_cast<std::size_t>(c * pipeline.stages + stage)]);
  return held;
}

double pipeline_bubble(const PipelineShape& shape) {
  return static_cast<double>(shape.stages - 1) / (static_cast<double>(shape.micro_batches) * shape.virtual_stages);
}

}  // namespace st
