#pragma once
// Text generation from the current parameters, so a person sees what the model learned.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/model.hpp"
#include "tokenizer/tokenizer.hpp"

namespace st {

struct Sampling {
  double temperature = 1.0;  // > 0: the softmax of logits / temperature
  int top_k = 0;             // > 0: draw only among the k most probable tokens (ties: the lower id)
  std::uint64_t seed = 0;    // the draws' stream: the same seed gives the same tokens
};

// Appends `count` sampled tokens to `context`; the model sees at most its last seq_len tokens.
// Decodes incrementally (Gpt2::decode): each token costs one row through the model while the
// context fits in seq_len, and a pass over the last seq_len tokens once it no longer does.
// With a sharded strategy as `buffers` every rank of its group must call it (the forward passes
// gather segments); every rank computes the same probabilities and draws the same tokens.
std::vector<int> generate(Model<float>& model, SegmentBuffers<float>& buffers, std::vector<int> context, int count,
                          const Sampling& sampling);

// Tokens as printable text: decoded by the tokenizer, control bytes other than newline and tab
// as \xNN, ids the tokenizer does not have (a model vocabulary wider than it) as <id>.
std::string render_text(const std::vector<int>& tokens, const Tokenizer& tokenizer);
// Token ids separated by spaces (token files read with the byte tokenizer).
std::string render_ids(const std::vector<int>& tokens);

}  // namespace st
