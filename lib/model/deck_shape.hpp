#pragma once
// The model a deck's [model] keys describe: the one place that turns them into a ModelShape
// (the run, check, the planner and the weights reader all ask here).
#include <cstdint>

#include "deck/config.hpp"
#include "model/layout.hpp"

namespace st {

// The deck's model shape, vocabulary padded per model.vocab_pad_to; a llama's keys at the values
// the run takes (n_kv_head 0: n_head; ffn_dim 0: Llama's rounding from multiple_of).
ModelShape model_shape(const ModelConfig& model);
// Padded vocabulary: vocab_size rounded up to a multiple of pad_to.
std::int64_t padded_vocab(std::int64_t vocab_size, std::int64_t pad_to);

}  // namespace st
