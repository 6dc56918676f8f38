#include "model/layout.hpp"

#include <numeric>

#include "core/error.hpp"

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

ParamLayout make_gpt2_layout(const Gpt2Shape& s) {
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

std::int64_t gpt2_matmul_params(const Gpt2Shape& s) {
  return s.n_layer * 12 * s.d_model * s.d_model + s.padded_vocab * s.d_model;
}

double gpt2_train_flops_per_token(const Gpt2Shape& s, std::int64_t seq) {
  return 6.0 * static_cast<double>(gpt2_matmul_params(s)) +
         12.0 * static_cast<double>(s.n_layer * s.d_model * seq);
}

}  // namespace st
