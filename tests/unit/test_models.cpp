// What every architecture must do alike (model/model.hpp), run on GPT-2 and on Llama (grouped-
// query attention, untied head): recomputation changes nothing, incremental decoding equals
// full forward passes, generation across the window equals them too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <ostream>
#include <vector>

#include "core/error.hpp"
#include "model/model.hpp"
#include "train/sampler.hpp"

namespace st {
// Test names and messages show the architecture by name.
void PrintTo(Arch arch, std::ostream* out) { *out << arch_name(arch); }

namespace {

// Small shapes of both: d_model 24, vocabulary 40 (padded 48); Llama with 4 query heads over
// 2 key/value heads, SwiGLU 40 wide and an LM head of its own.
ModelShape shape_of(Arch arch, std::int64_t n_layer, std::int64_t seq_len) {
  if (arch == Arch::gpt2) return {n_layer, 24, 3, seq_len, 40, 48};
  ModelShape s{n_layer, 24, 4, seq_len, 40, 48};
  s.arch = Arch::llama;
  s.n_kv_head = 2;
  s.ffn_dim = 40;
  s.tie_embeddings = false;
  return s;
}

// Weights larger than initialisation's, so that positions and keys matter.
float weight_scale(Arch arch) { return arch == Arch::gpt2 ? 4.0f : 6.0f; }

std::vector<int> tokens_for(int B, int T, int V, int salt) {
  std::vector<int> t(static_cast<std::size_t>(B * T));
  for (std::size_t i = 0; i < t.size(); ++i)
    t[i] = static_cast<int>((i * 7 + static_cast<std::size_t>(salt) * 3 + 1) % static_cast<std::size_t>(V));
  return t;
}

class EveryArch : public ::testing::TestWithParam<Arch> {};

// Activation recomputation changes what is kept, not what is computed: losses and gradients
// over several micro-batches (gradients accumulate) equal the run that keeps everything, bit
// for bit, and the next forward after backward is unaffected.
TEST_P(EveryArch, RecomputeEqualsKeepingEverythingBitForBit) {
  const ModelShape shape = shape_of(GetParam(), 3, 9);
  const int B = 3, T = 9;
  std::vector<float> params;
  auto run = [&](Recompute recompute) {
    const auto owned = make_model<float>(shape, B, host_exec(), recompute);
    Model<float>& model = *owned;
    params.assign(model.layout().total(), 0.0f);
    model.init_params(params, 11);
    std::vector<float> grads(params.size(), 0.0f);
    std::vector<double> losses;
    for (int micro = 0; micro < 3; ++micro) {
      const auto tokens = tokens_for(B, T, 40, 2 * micro), targets = tokens_for(B, T, 40, 2 * micro + 1);
      losses.push_back(model.forward(params, tokens.data(), targets.data(), B, T));
      model.backward(params, grads, 1.0f);
    }
    // Shorter sequences use the same buffers from their start.
    const auto tokens = tokens_for(2, 5, 40, 9), targets = tokens_for(2, 5, 40, 10);
    losses.push_back(model.forward(params, tokens.data(), targets.data(), 2, 5));
    model.backward(params, grads, 0.5f);
    return std::make_pair(losses, grads);
  };
  const auto reference = run(Recompute::none);
  for (const Recompute r : {Recompute::selective, Recompute::full}) {
    const auto got = run(r);
    EXPECT_EQ(got.first, reference.first) << recompute_name(r);
    EXPECT_TRUE(got.second == reference.second) << recompute_name(r) << ": gradients differ";
  }
  // The comparison can fail: other parameters give other gradients.
  double sum = 0;
  for (float g : reference.second) sum += std::fabs(g);
  EXPECT_GT(sum, 0.0);
}

// Incremental decoding gives the next-token probabilities a full forward pass gives at the same
// position: after a prompt, after each single token, after a reset, with every recompute setting
// (the blocks' buffers are reused differently) and a model made for more than one sequence.
TEST_P(EveryArch, DecodingEqualsAFullForwardAtEveryPosition) {
  const ModelShape shape = shape_of(GetParam(), 3, 20);
  const int T = 20;
  const auto tokens = tokens_for(1, T, 40, 5);
  for (const Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full}) {
    const auto owned = make_model<float>(shape, 2, host_exec(), recompute);
    Model<float>& model = *owned;
    std::vector<float> params(model.layout().total());
    model.init_params(params, 17);
    // Larger than initialisation's values, so that the positions and keys matter.
    for (float& p : params) p *= weight_scale(GetParam());
    FlatBuffers<float> flat(model.layout(), params);
    model.forward(flat, tokens.data(), nullptr, 1, T);
    std::vector<std::vector<float>> expected;
    for (int t = 0; t < T; ++t) {
      const auto p = model.probs(0, t);
      expected.emplace_back(p.begin(), p.end());
    }
    // Decoding sums a row's dot products in another order than the forward pass's banded matmuls:
    // float rounding leaves up to 1e-6 in a probability (~2e-6 with Llama's larger test weights); a
    // wrong position or cache row, 1e-3 and more.
    const double tolerance = GetParam() == Arch::gpt2 ? 1e-6 : 3e-6;
    auto worst_difference = [](std::span<const float> got, const std::vector<float>& want) {
      double worst = 0;
      for (std::size_t v = 0; v < want.size(); ++v) worst = std::max(worst, std::fabs(double(got[v]) - want[v]));
      return worst;
    };
    const int prompt = 7;
    auto got = model.decode(flat, tokens.data(), prompt);
    EXPECT_EQ(model.decoded_length(), prompt);
    EXPECT_LT(worst_difference(got, expected[prompt - 1]), tolerance) << recompute_name(recompute) << ", the prompt";
    for (int t = prompt; t < T; ++t) {
      got = model.decode(flat, tokens.data() + t, 1);
      EXPECT_LT(worst_difference(got, expected[t]), tolerance) << recompute_name(recompute) << ", position " << t;
    }
    // The comparison can fail: the last position's probabilities differ from the first's.
    EXPECT_GT(worst_difference(expected[T - 1], expected[0]), 1e-3);
    // Full: no room for another position until a reset.
    EXPECT_THROW(model.decode(flat, tokens.data(), 1), Error);
    model.reset_decoding();
    got = model.decode(flat, tokens.data(), 3);
    EXPECT_LT(worst_difference(got, expected[2]), tolerance) << recompute_name(recompute) << ", after a reset";
    // A training pass after decoding starts from its own batch.
    const auto targets = tokens_for(1, T, 40, 6);
    const auto fresh = make_model<float>(shape, 2, host_exec(), recompute);
    EXPECT_EQ(model.forward(flat, tokens.data(), targets.data(), 1, T),
              fresh->forward(flat, tokens.data(), targets.data(), 1, T));
  }
}

// generate() decodes incrementally and, past seq_len, moves its window: greedy tokens equal those
// of full forward passes over the last seq_len tokens, before and after the window moves.
TEST_P(EveryArch, GreedyTokensEqualFullForwardPassesAcrossTheWindow) {
  const ModelShape shape = shape_of(GetParam(), 2, 12);
  const auto owned = make_model<float>(shape, 1);
  Model<float>& model = *owned;
  std::vector<float> params(model.layout().total());
  model.init_params(params, 23);
  for (float& p : params) p *= weight_scale(GetParam());
  FlatBuffers<float> flat(model.layout(), params);
  const std::vector<int> prompt = {3, 14, 15, 9, 26};
  const int count = 25;  // 5 + 25 positions: the window of 12 moves 18 times
  std::vector<int> expected = prompt;
  for (int i = 0; i < count; ++i) {
    const std::size_t start = expected.size() > 12 ? expected.size() - 12 : 0;
    const int T = static_cast<int>(expected.size() - start);
    model.forward(flat, expected.data() + start, nullptr, 1, T);
    const auto probs = model.probs(0, T - 1);
    expected.push_back(static_cast<int>(std::max_element(probs.begin(), probs.end()) - probs.begin()));
  }
  const std::vector<int> got = generate(model, flat, prompt, count, {1.0, 1, 7});
  EXPECT_EQ(got, expected);
  // The comparison can fail: the tokens vary.
  EXPECT_GT(std::set<int>(expected.begin() + 5, expected.end()).size(), 3u);
}

// An id outside the vocabulary stops the pass before the embedding or the loss reads it, naming
// the id, where it is and model.vocab_size; in range, the same ids pass (the check is no refusal
// of everything). Decoding is checked too: its tokens come from prompts.
TEST_P(EveryArch, IdsOutsideTheVocabularyAreRefusedBeforeAnyKernelReadsThem) {
  const ModelShape shape = shape_of(GetParam(), 1, 4);
  const auto owned = make_model<float>(shape, 1, host_exec(), Recompute::none);
  Model<float>& model = *owned;
  std::vector<float> params(model.layout().total(), 0.0f);
  model.init_params(params, 3);
  const std::vector<int> fine{0, 39, 5, 7};
  EXPECT_NO_THROW(model.forward(params, fine.data(), fine.data(), 1, 4));

  auto message_of = [](const auto& pass) -> std::string {
    try {
      pass();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::vector<int> token_40{0, 39, 40, 7}, negative{0, 1, 2, -3};
  EXPECT_EQ(message_of([&] { model.forward(params, token_40.data(), fine.data(), 1, 4); }),
            "token id 40 (position 2 of 4 in this pass) is outside the model's vocabulary [0, 40): the ids must come "
            "from a tokenizer of at most model.vocab_size = 40 tokens");
  EXPECT_NE(message_of([&] { model.forward(params, fine.data(), negative.data(), 1, 4); })
                .find("target id -3 (position 3 of 4"),
            std::string::npos);
  FlatBuffers<float> flat(model.layout(), params);
  model.reset_decoding();
  EXPECT_NE(message_of([&] { model.decode(flat, token_40.data() + 2, 1); }).find("token id 40"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Models, EveryArch, ::testing::Values(Arch::gpt2, Arch::llama),
                         [](const auto& param_info) { return std::string(arch_name(param_info.param)); });

}  // namespace
}  // namespace st
