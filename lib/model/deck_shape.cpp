#include "model/deck_shape.hpp"

#include "model/arch.hpp"

namespace st {

std::int64_t padded_vocab(std::int64_t vocab_size, std::int64_t pad_to) {
  return (vocab_size + pad_to - 1) / pad_to * pad_to;
}

ModelShape model_shape(const ModelConfig& m) {
  ModelShape s{m.n_layer, m.d_model, m.n_head, m.seq_len, m.vocab_size, padded_vocab(m.vocab_size, m.vocab_pad_to)};
  s.arch = m.arch;
  arch_spec(s.arch).shape_from_deck(m, s);
  return s;
}

}  // namespace st
