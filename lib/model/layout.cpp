#include "model/layout.hpp"

#include <initializer_list>
#include <numeric>

#include "core/error.hpp"
#include "core/text.hpp"
#include "model/arch.hpp"

namespace st {

void ParamLayout::add_segment(const std::string& name, const std::vector<TensorSpec>& tensors) {
  Segment segment{name, total_, 0, {}};
  for (const TensorSpec& t : tensors) {
    const auto size = static_cast<std::size_t>(
        std::accumulate(t.shape.begin(), t.shape.end(), std::int64_t{1}, std::multiplies<>()));
    ST_REQUIRE((t.split == SplitDim::none) == t.parts.empty(), "a split tensor names its parts, a whole one none");
    segment.tensors.push_back({t.name, total_, size, t.shape, t.role, t.split, t.parts});
    total_ += size;
    segment.size += size;
  }
  segments_.push_back(std::move(segment));
}

const TensorSlot& ParamLayout::tensor(const std::string& name) const {
  for (const auto& segment : segments_)
    for (const auto& t : segment.tensors)
      if (t.name == name) return t;
  throw Error("parameter layout has no tensor named '" + name + "'");
}

std::vector<const TensorSlot*> ParamLayout::all_tensors() const {
  std::vector<const TensorSlot*> out;
  for (const auto& segment : segments_)
    for (const auto& t : segment.tensors) out.push_back(&t);
  return out;
}

std::string model_summary(const ModelShape& s) {
  const ArchSpec& arch = arch_spec(s.arch);
  return arch.summary_prefix + std::string("n_layer ") + std::to_string(s.n_layer) + ", d_model " +
         std::to_string(s.d_model) + ", n_head " + std::to_string(s.n_head) + arch.summary_keys(s) + ", seq_len " +
         std::to_string(s.seq_len) + ", vocab " + std::to_string(s.vocab_size) + " (padded " +
         std::to_string(s.padded_vocab) + ")";
}

std::int64_t ModelShape::widest_linear() const { return arch_spec(arch).mlp_up_projections * hidden(); }

const char* arch_name(Arch arch) {
  for (const auto& [value, name] : ChoiceNames<Arch>::table)
    if (value == arch) return name;
  return "?";
}

std::optional<Arch> arch_from_name(std::string_view name) { return choice_from_name<Arch>(name); }

const char* rope_scaling_name(RopeScaling scaling) {
  for (const auto& [value, name] : ChoiceNames<RopeScaling>::table)
    if (value == scaling) return name;
  return "?";
}

std::optional<RopeScaling> rope_scaling_from_name(std::string_view name) {
  return choice_from_name<RopeScaling>(name);
}

std::int64_t llama_ffn_dim(std::int64_t d_model, std::int64_t multiple_of, double multiplier) {
  auto hidden = static_cast<std::int64_t>(2 * 4 * d_model / 3);
  hidden = static_cast<std::int64_t>(multiplier * static_cast<double>(hidden));
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

std::int64_t rank_share(std::int64_t whole, TensorSplit split) { return whole / split.degree; }

std::int64_t rank_shares(std::initializer_list<std::int64_t> parts, TensorSplit split) {
  std::int64_t rows = 0;
  for (const std::int64_t part : parts) rows += rank_share(part, split);
  return rows;
}

std::string tensor_split_problem(const ModelShape& s, int degree) {
  if (degree < 1) return "the tensor-parallel degree must be at least 1";
  const auto split = [degree](std::int64_t n) { return n % degree == 0; };
  const std::string by = " by " + std::to_string(degree) + " tensor-parallel ranks";
  if (!split(s.n_head)) return "n_head " + std::to_string(s.n_head) + " does not divide" + by;
  // GPT-2's key/value heads are its heads (kv_heads() is n_head), already checked.
  if (!split(s.kv_heads()))
    return "n_kv_head " + std::to_string(s.kv_heads()) + " does not divide" + by;
  if (!split(s.hidden())) return "the MLP width " + std::to_string(s.hidden()) + " does not divide" + by;
  if (!split(s.padded_vocab))
    return "the padded vocabulary " + std::to_string(s.padded_vocab) + " does not divide" + by;
  return "";
}

namespace {

// Appends a copy of `segment` (its tensors, laid out anew) to `layout`.
void append_segment(ParamLayout& layout, const Segment& segment) {
  std::vector<TensorSpec> tensors;
  for (const TensorSlot& t : segment.tensors) tensors.push_back({t.name, t.shape, t.role, t.split, t.parts});
  layout.add_segment(segment.name, tensors);
}

}  // namespace

ParamLayout part_layout(const ParamLayout& whole, const ModelShape& shape, const ModelPart& part) {
  const std::int64_t end = part.end(shape);
  ST_REQUIRE(part.first_block >= 0 && part.first_block < end && end <= shape.n_layer,
             "a model part needs at least one of the model's blocks");
  ST_REQUIRE(whole.segments().size() == static_cast<std::size_t>(shape.n_layer) + 2,
             "a whole layout has the embeddings, one segment per block and the final norm");
  ParamLayout layout;
  auto keep = [&layout](const Segment& segment) { append_segment(layout, segment); };
  if (part.holds_embeddings(shape)) keep(whole.segments().front());
  for (std::int64_t b = part.first_block; b < end; ++b) keep(whole.segments()[static_cast<std::size_t>(b) + 1]);
  if (part.heads(shape)) keep(whole.segments().back());
  return layout;
}

ParamLayout make_layout(const ModelShape& shape, TensorSplit split, const ModelPart& part) {
  const ParamLayout whole = make_layout(shape, split);
  return part.whole(shape) ? whole : part_layout(whole, shape, part);
}

ParamLayout stage_layout(const ModelShape& shape, TensorSplit split, const std::vector<ModelPart>& parts) {
  if (parts.size() == 1) return make_layout(shape, split, parts.front());
  const ParamLayout whole = make_layout(shape, split);
  ParamLayout layout;
  for (const ModelPart& part : parts) {
    const ParamLayout chunk = part_layout(whole, shape, part);
    for (const Segment& segment : chunk.segments()) append_segment(layout, segment);
  }
  return layout;
}

ParamLayout make_layout(const ModelShape& s, TensorSplit split) {
  if (split.active()) {
    const std::string problem = tensor_split_problem(s, split.degree);
    if (!problem.empty()) throw Error(problem);
    ST_REQUIRE(split.rank >= 0 && split.rank < split.degree, "tensor-parallel rank outside its group");
  }
  return arch_spec(s.arch).layout(s, split);
}

std::int64_t matmul_params(const ModelShape& s) { return arch_spec(s.arch).matmul_params(s); }

double head_train_flops_per_token(const ModelShape& s) {
  ModelShape none = s;
  none.n_layer = 0;
  return 6.0 * static_cast<double>(matmul_params(none));
}

double block_train_flops_per_token(const ModelShape& s) {
  ModelShape one = s;
  one.n_layer = 1;
  return train_flops_per_token(one, s.seq_len) - head_train_flops_per_token(s);
}

double train_flops_per_token(const ModelShape& s, std::int64_t seq) {
  return 6.0 * static_cast<double>(matmul_params(s)) +
         12.0 * static_cast<double>(s.n_layer * s.d_model * seq);
}

double mfu_flops_per_token(const ModelShape& s, std::int64_t seq) {
  return 6.0 * static_cast<double>(make_layout(s).total()) + 6.0 * static_cast<double>(s.n_layer * s.d_model * seq);
}

}  // namespace st
