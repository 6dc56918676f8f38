#include "model/layout.hpp"

#include <initializer_list>
#include <numeric>

#include "core/error.hpp"
#include "core/text.hpp"

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
  std::string text = std::string(s.arch == Arch::llama ? "llama, " : "") + "n_layer " + std::to_string(s.n_layer) +
                     ", d_model " + std::to_string(s.d_model) + ", n_head " + std::to_string(s.n_head);
  if (s.arch == Arch::llama)
    text += ", n_kv_head " + std::to_string(s.kv_heads()) + ", ffn_dim " + std::to_string(s.hidden()) +
            (s.tie_embeddings ? ", tied" : ", untied") + " LM head";
  if (s.arch == Arch::llama && s.rope_scaling == RopeScaling::llama3)
    text += ", rope_scaling llama3 (factor " + format_shortest(s.rope_factor) + ", original context " +
            std::to_string(s.rope_original_positions) + ")";
  return text + ", seq_len " + std::to_string(s.seq_len) + ", vocab " + std::to_string(s.vocab_size) + " (padded " +
         std::to_string(s.padded_vocab) + ")";
}

const char* arch_name(Arch arch) { return arch == Arch::llama ? "llama" : "gpt2"; }

std::optional<Arch> arch_from_name(std::string_view name) {
  if (name == "gpt2") return Arch::gpt2;
  if (name == "llama") return Arch::llama;
  return std::nullopt;
}

const char* rope_scaling_name(RopeScaling scaling) { return scaling == RopeScaling::llama3 ? "llama3" : "none"; }

std::optional<RopeScaling> rope_scaling_from_name(std::string_view name) {
  if (name == "none") return RopeScaling::none;
  if (name == "llama3") return RopeScaling::llama3;
  return std::nullopt;
}

std::int64_t llama_ffn_dim(std::int64_t d_model, std::int64_t multiple_of, double multiplier) {
  auto hidden = static_cast<std::int64_t>(2 * 4 * d_model / 3);
  hidden = static_cast<std::int64_t>(multiplier * static_cast<double>(hidden));
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

namespace {

// A rank's share of `whole` along a dimension its tensor-parallel group splits (the whole when
// the group is one rank).
std::int64_t share(std::int64_t whole, TensorSplit split) { return whole / split.degree; }

// Where the parts given are whole tensors' sizes, the rows a rank holds: each part's share.
std::int64_t shares(std::initializer_list<std::int64_t> parts, TensorSplit split) {
  std::int64_t rows = 0;
  for (const std::int64_t part : parts) rows += share(part, split);
  return rows;
}

ParamLayout make_gpt2_layout(const ModelShape& s, TensorSplit t) {
  using R = TensorRole;
  using D = SplitDim;
  const std::int64_t C = s.d_model;
  ParamLayout layout;
  layout.add_segment("embeddings", {{"wte", {share(s.padded_vocab, t), C}, R::embedding, D::rows, {s.padded_vocab}},
                                    {"wpe", {s.seq_len, C}, R::embedding}});
  for (std::int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "block" + std::to_string(l) + ".";
    layout.add_segment("block" + std::to_string(l),
                       {{p + "ln1.w", {C}, R::norm},
                        {p + "ln1.b", {C}, R::norm},
                        {p + "attn.qkv.w", {shares({C, C, C}, t), C}, R::matrix, D::rows, {C, C, C}},
                        {p + "attn.qkv.b", {shares({C, C, C}, t)}, R::bias, D::rows, {C, C, C}},
                        {p + "attn.proj.w", {C, share(C, t)}, R::matrix, D::columns, {C}},
                        {p + "attn.proj.b", {C}, R::bias},
                        {p + "ln2.w", {C}, R::norm},
                        {p + "ln2.b", {C}, R::norm},
                        {p + "mlp.fc.w", {share(4 * C, t), C}, R::matrix, D::rows, {4 * C}},
                        {p + "mlp.fc.b", {share(4 * C, t)}, R::bias, D::rows, {4 * C}},
                        {p + "mlp.proj.w", {C, share(4 * C, t)}, R::matrix, D::columns, {4 * C}},
                        {p + "mlp.proj.b", {C}, R::bias}});
  }
  layout.add_segment("final_norm", {{"lnf.w", {C}, R::norm}, {"lnf.b", {C}, R::norm}});
  return layout;
}

ParamLayout make_llama_layout(const ModelShape& s, TensorSplit t) {
  using R = TensorRole;
  using D = SplitDim;
  const std::int64_t C = s.d_model, F = s.hidden(), KV = s.kv_heads() * s.head_dim();
  ParamLayout layout;
  if (s.tie_embeddings) {
    layout.add_segment("embeddings", {{"wte", {share(s.padded_vocab, t), C}, R::embedding, D::rows, {s.padded_vocab}}});
  } else {
    // The LM head sits with the embedding: both are held for the whole pass, as the tied one is.
    layout.add_segment("embeddings", {{"wte", {share(s.padded_vocab, t), C}, R::embedding, D::rows, {s.padded_vocab}},
                                      {"lm_head.w", {share(s.padded_vocab, t), C}, R::matrix, D::rows, {s.padded_vocab}}});
  }
  for (std::int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "block" + std::to_string(l) + ".";
    layout.add_segment("block" + std::to_string(l),
                       {{p + "attn_norm.w", {C}, R::norm},
                        {p + "attn.qkv.w", {shares({C, KV, KV}, t), C}, R::matrix, D::rows, {C, KV, KV}},
                        {p + "attn.proj.w", {C, share(C, t)}, R::matrix, D::columns, {C}},
                        {p + "mlp_norm.w", {C}, R::norm},
                        {p + "mlp.gate_up.w", {shares({F, F}, t), C}, R::matrix, D::rows, {F, F}},
                        {p + "mlp.down.w", {C, share(F, t)}, R::matrix, D::columns, {F}}});
  }
  layout.add_segment("final_norm", {{"lnf.w", {C}, R::norm}});
  return layout;
}

}  // namespace

std::string tensor_split_problem(const ModelShape& s, int degree) {
  if (degree < 1) return "the tensor-parallel degree must be at least 1";
  const auto split = [degree](std::int64_t n) { return n % degree == 0; };
  const std::string by = " by " + std::to_string(degree) + " tensor-parallel ranks";
  if (!split(s.n_head)) return "n_head " + std::to_string(s.n_head) + " does not divide" + by;
  if (s.arch == Arch::llama && !split(s.kv_heads()))
    return "n_kv_head " + std::to_string(s.kv_heads()) + " does not divide" + by;
  if (!split(s.hidden())) return "the MLP width " + std::to_string(s.hidden()) + " does not divide" + by;
  if (!split(s.padded_vocab))
    return "the padded vocabulary " + std::to_string(s.padded_vocab) + " does not divide" + by;
  return "";
}

ParamLayout make_layout(const ModelShape& s, TensorSplit split) {
  if (split.active()) {
    const std::string problem = tensor_split_problem(s, split.degree);
    if (!problem.empty()) throw Error(problem);
    ST_REQUIRE(split.rank >= 0 && split.rank < split.degree, "tensor-parallel rank outside its group");
  }
  return s.arch == Arch::llama ? make_llama_layout(s, split) : make_gpt2_layout(s, split);
}

std::int64_t matmul_params(const ModelShape& s) {
  if (s.arch == Arch::gpt2) return s.n_layer * 12 * s.d_model * s.d_model + s.padded_vocab * s.d_model;
  const std::int64_t C = s.d_model;
  const std::int64_t block = s.qkv_width() * C + C * C + 3 * s.hidden() * C;
  return s.n_layer * block + s.padded_vocab * C;  // the LM head, tied or not; the lookup costs no FLOPs
}

double train_flops_per_token(const ModelShape& s, std::int64_t seq) {
  return 6.0 * static_cast<double>(matmul_params(s)) +
         12.0 * static_cast<double>(s.n_layer * s.d_model * seq);
}

double mfu_flops_per_token(const ModelShape& s, std::int64_t seq) {
  return 6.0 * static_cast<double>(make_layout(s).total()) + 6.0 * static_cast<double>(s.n_layer * s.d_model * seq);
}

}  // namespace st
