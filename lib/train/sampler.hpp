#pragma once
// Text generation from the current parameters, so a person sees what the model learned.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/gpt2.hpp"

namespace st {

// Appends `count` sampled tokens to `context` (temperature-scaled softmax, seeded draws); the
// model sees at most its last seq_len tokens.
// With a sharded strategy as `buffers` every rank of its group must call it (the forward passes
// gather segments).
std::vector<int> generate(Gpt2<float>& model, SegmentBuffers<float>& buffers, std::vector<int> context, int count,
                          double temperature, std::uint64_t seed);

// Byte tokens as text (printable_utf8: valid UTF-8, other bytes and control characters but
// newline and tab as \xNN); wider vocabularies as token ids.
std::string render_tokens(const std::vector<int>& tokens, bool byte_level);

}  // namespace st
