#include "model/deck_shape.hpp"

#include <optional>

#include "core/error.hpp"

namespace st {

std::int64_t padded_vocab(std::int64_t vocab_size, std::int64_t pad_to) {
  return (vocab_size + pad_to - 1) / pad_to * pad_to;
}

ModelShape model_shape(const ModelConfig& m) {
  ModelShape s{m.n_layer, m.d_model, m.n_head, m.seq_len, m.vocab_size, padded_vocab(m.vocab_size, m.vocab_pad_to)};
  const std::optional<Arch> arch = arch_from_name(m.arch.empty() ? "gpt2" : m.arch);
  ST_REQUIRE(arch.has_value(), "model.arch was not validated");
  s.arch = *arch;
  if (s.arch == Arch::llama) {
    s.n_kv_head = m.n_kv_head > 0 ? m.n_kv_head : m.n_head;
    s.ffn_dim = m.ffn_dim > 0 ? m.ffn_dim : llama_ffn_dim(m.d_model, m.multiple_of);
    s.norm_eps = m.norm_eps;
    s.rope_theta = m.rope_theta;
    s.tie_embeddings = m.tie_embeddings;
    const std::optional<RopeScaling> scaling = rope_scaling_from_name(m.rope_scaling.empty() ? "none" : m.rope_scaling);
    ST_REQUIRE(scaling.has_value(), "model.rope_scaling was not validated");
    s.rope_scaling = *scaling;
    if (s.rope_scaling == RopeScaling::llama3) {
      s.rope_factor = m.rope_factor;
      s.rope_low_freq_factor = m.rope_low_freq_factor;
      s.rope_high_freq_factor = m.rope_high_freq_factor;
      s.rope_original_positions = m.rope_original_positions;
    }
  }
  return s;
}

}  // namespace st
