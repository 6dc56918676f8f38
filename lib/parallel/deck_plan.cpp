#include "parallel/deck_plan.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/text.hpp"
#include "model/deck_shape.hpp"

namespace st {

int deck_tensor_degree(const Config& config, int world_size, int node_size, bool uniform_nodes) {
  const auto degree = static_cast<int>(config.parallel.tensor);
  if (degree == 1) return 1;
  const std::string key = config.deck_path + ": parallel.tensor = " + std::to_string(degree);
  if (world_size % degree != 0 || node_size % degree != 0 || !uniform_nodes)
    throw Error(key + " splits each layer over consecutive ranks inside one node, so it must divide the ranks per "
                      "node; this job has " + std::to_string(world_size) + " rank(s), " + std::to_string(node_size) +
                    " on this node" + (uniform_nodes ? "" : ", nodes holding different numbers of ranks") +
                    "; launch it on a multiple of " + std::to_string(degree) + " ranks per node (`shardtrain check " +
                    config.deck_path + " --ranks " + std::to_string(degree) + "` checks it for " +
                    std::to_string(degree) + " ranks from here)",
                ErrorScope::all_ranks);
  if (const std::string problem = tensor_split_problem(model_shape(config.model), degree); !problem.empty())
    throw Error(key + ": " + problem + " (the model's heads, n_kv_head, MLP width and padded vocabulary must divide)",
                ErrorScope::all_ranks);
  return degree;
}

int deck_data_ranks(const Config& config, int world_size) {
  const std::int64_t across = config.parallel.pipeline * config.parallel.tensor;
  return world_size % across == 0 && world_size >= across ? static_cast<int>(world_size / across) : 1;
}

void deck_pipeline_degree(const Config& config, int world_size) {
  const auto& p = config.parallel;
  if (p.pipeline == 1 && !p.stage_blocks.empty())
    throw Error(config.deck_path + ": parallel.stage_blocks cuts the blocks between pipeline stages, and this deck has "
                    "none (parallel.pipeline = 1): leave it [] or set parallel.pipeline",
                ErrorScope::all_ranks);
  if (p.pipeline == 1 && p.virtual_stages == 1) return;
  const std::string key = config.deck_path + ": parallel.pipeline = " + std::to_string(p.pipeline);
  if (p.pipeline == 1)
    throw Error(config.deck_path + ": parallel.virtual_stages = " + std::to_string(p.virtual_stages) +
                    " cuts the stages of a pipeline into chunks, and this deck has none (parallel.pipeline = 1)",
                ErrorScope::all_ranks);
  if (world_size % (p.pipeline * p.tensor) != 0)
    throw Error(key + " with parallel.tensor = " + std::to_string(p.tensor) + " needs a world of a multiple of " +
                    std::to_string(p.pipeline * p.tensor) + " ranks (pipeline x tensor); this job has " +
                    std::to_string(world_size),
                ErrorScope::all_ranks);
  const ModelShape model = model_shape(config.model);
  const std::int64_t chunks = p.pipeline * p.virtual_stages;
  if (model.n_layer < chunks)
    throw Error(key + (p.virtual_stages > 1 ? " x parallel.virtual_stages = " + std::to_string(p.virtual_stages) : "") +
                    " cuts the model into " + std::to_string(chunks) + " parts of consecutive blocks, more than "
                    "model.n_layer = " + std::to_string(model.n_layer),
                ErrorScope::all_ranks);
  if (const std::string problem = stage_blocks_problem(model, static_cast<int>(chunks), p.stage_blocks); !problem.empty())
    throw Error(config.deck_path + ": " + problem, ErrorScope::all_ranks);
  // The schedule's own demands on the chunks (those on the micro-batches wait for the batch).
  const PipelineShape any{static_cast<int>(p.pipeline), static_cast<int>(p.pipeline), static_cast<int>(p.virtual_stages)};
  if (const std::string problem = pipeline_schedule_problem(p.pipeline_schedule, any); !problem.empty())
    throw Error(config.deck_path + ": " + problem, ErrorScope::all_ranks);
}

std::string pipeline_note(const Config& config, std::int64_t micro_batches, std::int64_t micro_batch) {
  const auto& p = config.parallel;
  if (p.pipeline == 1) return "";
  const ModelShape shape = model_shape(config.model);
  const PipelineShape pipeline = deck_pipeline_shape(config, micro_batches);
  const int V = pipeline.virtual_stages;
  // Built by appending: GCC 12 warns falsely (-Wrestrict) about long chains of string sums.
  std::string note = "; pipeline: ";
  note += std::to_string(p.pipeline);
  note += " stages";
  if (V > 1) {
    note += " x ";
    note += std::to_string(V);
    note += " chunks";
  }
  note += " (blocks ";
  for (int stage = 0; stage < pipeline.stages; ++stage) {
    if (stage > 0) note += V > 1 ? "; " : ", ";
    bool first = true;
    for (const ModelPart& part : pipeline_stage_parts(shape, pipeline, stage)) {
      if (!first) note += " + ";
      first = false;
      note += std::to_string(part.first_block);
      if (part.blocks(shape) > 1) {
        note += '-';
        note += std::to_string(part.end(shape) - 1);
      }
    }
  }
  // Each micro-batch's residual stream goes forward and its gradient back: the first stage sends
  // each micro-batch's activations on, and with V chunks its later chunks' gradients back too.
  const double bytes =
      static_cast<double>(micro_batches * (2 * V - 1)) *
      static_cast<double>(pipeline_message_bytes(shape, micro_batch, static_cast<int>(p.tensor), p.sequence_parallel,
                                                 p.activation_value_bytes()));
  note += "), ";
  note += name_of(p.pipeline_schedule);
  note += ", up to ";
  note += std::to_string(pipeline_peak_in_flight(p.pipeline_schedule, pipeline, 0));
  note += V > 1 ? " micro-batch chunks" : " micro-batch(es)";
  note += " in flight on the first stage, bubble ";
  note += std::to_string(static_cast<int>(std::lround(100 * pipeline_bubble(pipeline))));
  note += V > 1 ? "% of the step ((P - 1) / (m V)), " : "% of the step ((P - 1) / m), ";
  note += format_bytes(bytes);
  note += V > 1 ? " per step sent by the first stage" : " per step to each neighbouring stage";
  return note;
}

std::uint64_t pipeline_message_bytes(const ModelShape& shape, std::int64_t micro_batch, int tensor,
                                     bool sequence_parallel, std::size_t value_bytes) {
  // B x T rows of d_model values (fp32, or bf16 activations); a tensor group's ranks each send
  // their share of the rows under sequence parallelism (Model::part_boundary_elements).
  const auto rows = static_cast<std::uint64_t>(micro_batch * shape.seq_len) /
                    static_cast<std::uint64_t>(sequence_parallel && tensor > 1 ? tensor : 1);
  return rows * static_cast<std::uint64_t>(shape.d_model) * value_bytes;
}

PipelineShape deck_pipeline_shape(const Config& config, std::int64_t micro_batches) {
  const auto& p = config.parallel;
  return {static_cast<int>(p.pipeline), static_cast<int>(micro_batches), static_cast<int>(p.virtual_stages),
          p.stage_blocks};
}

PipelineShape deck_pipeline(const Config& config, int world_size, std::int64_t micro_batches) {
  const auto& p = config.parallel;
  const PipelineShape shape = deck_pipeline_shape(config, micro_batches);
  if (shape.stages == 1 && shape.virtual_stages == 1) return shape;
  deck_pipeline_degree(config, world_size);
  if (const std::string problem = pipeline_schedule_problem(p.pipeline_schedule, shape); !problem.empty())
    throw Error(config.deck_path + ": " + problem, ErrorScope::all_ranks);
  if (config.run.sample_every > 0)
    throw Error(config.deck_path + ": run.sample_every = " + std::to_string(config.run.sample_every) +
                    " samples from the whole model, which a pipeline's stages hold in parts: set run.sample_every = 0 "
                    "with parallel.pipeline > 1, and generate from the run's checkpoint (`shardtrain generate "
                    "RUN_DIR`)",
                ErrorScope::all_ranks);
  return shape;
}

Mesh deck_mesh(const Config& config, int world_size, int node_size) {
  return make_mesh(config.parallel.strategy, config.parallel.shard_group, world_size, node_size, config.deck_path);
}

ParallelChoice deck_choice(const Config& config) {
  const GradReduction reduction = config.parallel.grad_reduction == GradReduction::automatic
                                      ? GradReduction::step
                                      : config.parallel.grad_reduction;
  return {config.parallel.strategy, config.parallel.shard_group, static_cast<int>(config.parallel.tensor),
          config.model.recompute, reduction};
}

ParallelPlan choice_plan(const Config& config, const ParallelChoice& choice, const ParamLayout& layout, int world_size,
                         int node_size, std::int64_t micro_batches, std::int64_t micro_batch,
                         const std::vector<ModelPart>& parts) {
  const int tensor = std::max(1, choice.tensor);
  Mesh mesh =
      make_mesh(choice.strategy, choice.shard_group, world_size / tensor, std::max(1, node_size / tensor), config.deck_path);
  mesh.tensor = tensor;
  const ModelShape shape = model_shape(config.model);
  // The tensor group's sums are those of the parts held: their blocks, the embedding's and the
  // head's where a part has them.
  std::int64_t blocks = parts.empty() ? shape.n_layer : 0;
  bool embeds = parts.empty(), heads = parts.empty();
  for (const ModelPart& part : parts) {
    blocks += part.blocks(shape);
    embeds = embeds || part.embeds();
    heads = heads || part.heads(shape);
  }
  const ActivationTraffic activations{micro_batch * shape.seq_len,
                                      shape.d_model,
                                      blocks,
                                      choice.recompute == Recompute::full,
                                      tensor > 1 && config.parallel.sequence_parallel,
                                      embeds,
                                      heads,
                                      static_cast<int>(config.parallel.activation_value_bytes())};
  return ParallelPlan(layout, choice.strategy, config.parallel.precision, mesh, micro_batches,
                      config.parallel.bucket_mb, activations, choice.grad_reduction);
}

ParallelPlan deck_plan(const Config& config, const ParamLayout& layout, int world_size, int node_size,
                       std::int64_t micro_batches, std::int64_t micro_batch, const std::vector<ModelPart>& parts) {
  return choice_plan(config, deck_choice(config), layout, world_size, node_size, micro_batches, micro_batch, parts);
}

}  // namespace st
