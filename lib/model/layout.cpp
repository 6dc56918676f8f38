#include "model/layout.hpp"

#include <numeric>

#include "core/error.hpp"
#include "core/text.hpp"

namespace st {

void ParamLayout::add_segment(const std::string& name,
                              const std::vector<std::pair<std::string, std::vector<std::int64_t>>>& tensors,
                              const std::vector<TensorRole>& roles) {
  Segment segment{name, total_, 0, {}};
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& [tensor_name, shape] = tensors[i];
    const auto size = static_cast<std::size_t>(
        std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>()));
    segment.tensors.push_back({tensor_name, total_, size, shape, roles[i]});
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

ParamLayout make_gpt2_layout(const ModelShape& s) {
  using R = TensorRole;
  const std::int64_t C = s.d_model;
  ParamLayout layout;
  layout.add_segment("embeddings", {{"wte", {s.padded_vocab, C}}, {"wpe", {s.seq_len, C}}}, {R::embedding, R::embedding});
  for (std::int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "block" + std::to_string(l) + ".";
    layout.add_segment("block" + std::to_string(l),
                       {{p + "ln1.w", {C}},
                        {p + "ln1.b", {C}},
                        {p + "attn.qkv.w", {3 * C, C}},
                        {p + "attn.qkv.b", {3 * C}},
                        {p + "attn.proj.w", {C, C}},
                        {p + "attn.proj.b", {C}},
                        {p + "ln2.w", {C}},
                        {p + "ln2.b", {C}},
                        {p + "mlp.fc.w", {4 * C, C}},
                        {p + "mlp.fc.b", {4 * C}},
                        {p + "mlp.proj.w", {C, 4 * C}},
                        {p + "mlp.proj.b", {C}}},
                       {R::norm, R::norm, R::matrix, R::bias, R::matrix, R::bias, R::norm, R::norm, R::matrix,
                        R::bias, R::matrix, R::bias});
  }
  layout.add_segment("final_norm", {{"lnf.w", {C}}, {"lnf.b", {C}}}, {R::norm, R::norm});
  return layout;
}

ParamLayout make_llama_layout(const ModelShape& s) {
  using R = TensorRole;
  const std::int64_t C = s.d_model, F = s.hidden();
  ParamLayout layout;
  if (s.tie_embeddings) {
    layout.add_segment("embeddings", {{"wte", {s.padded_vocab, C}}}, {R::embedding});
  } else {
    // The LM head sits with the embedding: both are held for the whole pass, as the tied one is.
    layout.add_segment("embeddings", {{"wte", {s.padded_vocab, C}}, {"lm_head.w", {s.padded_vocab, C}}},
                       {R::embedding, R::matrix});
  }
  for (std::int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "block" + std::to_string(l) + ".";
    layout.add_segment("block" + std::to_string(l),
                       {{p + "attn_norm.w", {C}},
                        {p + "attn.qkv.w", {s.qkv_width(), C}},
                        {p + "attn.proj.w", {C, C}},
                        {p + "mlp_norm.w", {C}},
                        {p + "mlp.gate_up.w", {2 * F, C}},
                        {p + "mlp.down.w", {C, F}}},
                       {R::norm, R::matrix, R::matrix, R::norm, R::matrix, R::matrix});
  }
  layout.add_segment("final_norm", {{"lnf.w", {C}}}, {R::norm});
  return layout;
}

}  // namespace

ParamLayout make_layout(const ModelShape& s) {
  return s.arch == Arch::llama ? make_llama_layout(s) : make_gpt2_layout(s);
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

}  // namespace st
