// The whole model: gradients against finite differences, initial loss, initialisation, layout.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <algorithm>
#include <vector>

#include "core/error.hpp"
#include "flash_carving_exec.hpp"
#include "model/gpt2.hpp"
#include "model/layout.hpp"
#include "model_gradient_check.hpp"

namespace st {
namespace {

ModelShape tiny_shape() { return {2, 8, 2, 6, 11, 16}; }

std::vector<int> tokens_for(int B, int T, int V, int salt) {
  std::vector<int> t(static_cast<std::size_t>(B * T));
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int>((i * 7 + static_cast<std::size_t>(salt) * 3 + 1) % static_cast<std::size_t>(V));
  return t;
}

TEST(Gpt2Layout, SegmentsCoverTheBufferInOrder) {
  const ModelShape s{3, 16, 4, 32, 100, 128};
  const ParamLayout layout = make_layout(s);
  ASSERT_EQ(layout.segments().size(), 5u);  // embeddings, 3 blocks, final norm
  std::size_t expected_offset = 0;
  for (const auto& segment : layout.segments()) {
    EXPECT_EQ(segment.offset, expected_offset) << segment.name;
    std::size_t inside = segment.offset;
    for (const auto& t : segment.tensors) {
      EXPECT_EQ(t.offset, inside) << t.name;
      inside += t.size;
    }
    EXPECT_EQ(inside, segment.offset + segment.size);
    expected_offset += segment.size;
  }
  EXPECT_EQ(layout.total(), expected_offset);
  // GPT-2 parameter count: (Vp + T) C + L (12 C^2 + 13 C) + 2 C
  const std::size_t C = 16, L = 3;
  EXPECT_EQ(layout.total(), (128 + 32) * C + L * (12 * C * C + 13 * C) + 2 * C);
}

TEST(Gpt2Layout, Gpt2SmallHas124MParameters) {
  const ModelShape gpt2_small{12, 768, 12, 1024, 50257, 50257};
  EXPECT_EQ(make_layout(gpt2_small).total(), 124439808u);  // the published count
}

TEST(Gpt2Model, WholeModelGradientMatchesFiniteDifferences) {
  const ModelShape shape = tiny_shape();
  const int B = 2, T = 5;
  Gpt2<double> model(shape, B);
  std::vector<double> params(model.layout().total());
  model.init_params(params, 42);
  // Larger weights than GPT-2's 0.02 make every path contribute measurably.
  for (auto& p : params) p *= 10.0;
  const auto tokens = tokens_for(B, T, static_cast<int>(shape.vocab_size), 0);
  const auto targets = tokens_for(B, T, static_cast<int>(shape.vocab_size), 1);

  const std::vector<double> grads =
      expect_gradients_match_finite_differences(model, params, tokens, targets, B, T, "gpt2");
  // Padded vocabulary rows are never used: their gradient is exactly zero.
  const TensorSlot& wte = model.layout().tensor("wte");
  for (std::size_t i = wte.offset + shape.vocab_size * shape.d_model; i < wte.offset + wte.size; ++i)
    EXPECT_EQ(grads[i], 0.0);
}

TEST(Gpt2Model, GradientsAccumulateAndScale) {
  const ModelShape shape = tiny_shape();
  Gpt2<double> model(shape, 2);
  std::vector<double> params(model.layout().total());
  model.init_params(params, 7);
  const auto tokens = tokens_for(2, 6, 11, 2), targets = tokens_for(2, 6, 11, 3);
  std::vector<double> once(params.size(), 0.0), twice_half(params.size(), 0.0);
  model.forward(params, tokens.data(), targets.data(), 2, 6);
  model.backward(params, once, 1.0);
  for (int k = 0; k < 2; ++k) {
    model.forward(params, tokens.data(), targets.data(), 2, 6);
    model.backward(params, twice_half, 0.5);
  }
  for (std::size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice_half[i], once[i], 1e-12);
}

TEST(Gpt2Model, InitialLossIsNearLnVocab) {
  const ModelShape shape{2, 64, 4, 32, 256, 256};
  Gpt2<float> model(shape, 4);
  std::vector<float> params(model.layout().total());
  model.init_params(params, 1337);
  const auto tokens = tokens_for(4, 32, 256, 4), targets = tokens_for(4, 32, 256, 5);
  const double loss = model.forward(params, tokens.data(), targets.data(), 4, 32);
  EXPECT_NEAR(loss, std::log(256.0), 0.05);
}

TEST(Gpt2Model, InitialisationFollowsGpt2) {
  const ModelShape shape{4, 64, 4, 32, 250, 256};
  Gpt2<float> model(shape, 1);
  std::vector<float> params(model.layout().total());
  model.init_params(params, 3);
  auto stddev = [&](const std::string& name) {
    const TensorSlot& t = model.layout().tensor(name);
    double s = 0;
    for (std::size_t i = t.offset; i < t.offset + t.size; ++i) s += static_cast<double>(params[i]) * params[i];
    return std::sqrt(s / static_cast<double>(t.size));
  };
  EXPECT_NEAR(stddev("block0.attn.qkv.w"), 0.02, 0.001);
  EXPECT_NEAR(stddev("block1.mlp.fc.w"), 0.02, 0.001);
  EXPECT_NEAR(stddev("block0.mlp.proj.w"), 0.02 / std::sqrt(8.0), 0.0005);  // 1/sqrt(2 n_layer)
  EXPECT_NEAR(stddev("block2.attn.proj.w"), 0.02 / std::sqrt(8.0), 0.0005);
  EXPECT_EQ(stddev("block0.attn.qkv.b"), 0.0);
  const TensorSlot& ln = model.layout().tensor("block3.ln2.w");
  for (std::size_t i = ln.offset; i < ln.offset + ln.size; ++i) EXPECT_EQ(params[i], 1.0f);
  const TensorSlot& wte = model.layout().tensor("wte");
  for (std::size_t i = wte.offset + 250 * 64; i < wte.offset + wte.size; ++i) EXPECT_EQ(params[i], 0.0f);
  // The same seed gives the same parameters; another seed does not.
  std::vector<float> again(params.size()), other(params.size());
  model.init_params(again, 3);
  model.init_params(other, 4);
  EXPECT_EQ(again, params);
  EXPECT_NE(other, params);
}

TEST(Gpt2Model, FloatAndDoubleAgree) {
  const ModelShape shape{2, 32, 4, 16, 64, 64};
  Gpt2<float> mf(shape, 2);
  Gpt2<double> md(shape, 2);
  std::vector<float> pf(mf.layout().total());
  mf.init_params(pf, 11);
  std::vector<double> pd(pf.begin(), pf.end());
  const auto tokens = tokens_for(2, 16, 64, 6), targets = tokens_for(2, 16, 64, 7);
  std::vector<float> gf(pf.size(), 0.0f);
  std::vector<double> gd(pd.size(), 0.0);
  EXPECT_NEAR(mf.forward(pf, tokens.data(), targets.data(), 2, 16), md.forward(pd, tokens.data(), targets.data(), 2, 16),
              1e-5);
  mf.backward(pf, gf, 1.0f);
  md.backward(pd, gd, 1.0);
  for (std::size_t i = 0; i < gf.size(); ++i) EXPECT_NEAR(gf[i], gd[i], 1e-5 + 1e-3 * std::abs(gd[i]));
}

TEST(Gpt2Model, FlopsPerToken) {
  const ModelShape s{12, 768, 12, 1024, 50257, 50304};
  // 6 x (12 L C^2 + Vp C) + 12 L C T
  EXPECT_DOUBLE_EQ(train_flops_per_token(s, 1024),
                   6.0 * (12.0 * 12 * 768 * 768 + 50304.0 * 768) + 12.0 * 12 * 768 * 1024);
}

// MFU's count is llm.c's: 6 N + 6 L C T with N every parameter. For GPT-2 124M llm.c prints
// num_parameters 124475904 (the vocabulary padded to 50304) and counts 803.5 MFLOP a token at
// T = 1024, 6% under the planner's full-T x T count of the matmul parameters (854.7 MFLOP).
TEST(Gpt2Model, MfuFlopsPerTokenAreLlmcs) {
  const ModelShape s{12, 768, 12, 1024, 50257, 50304};
  EXPECT_EQ(make_layout(s).total(), 124475904u);
  EXPECT_DOUBLE_EQ(mfu_flops_per_token(s, 1024), 6.0 * 124475904 + 6.0 * 12 * 768 * 1024);
  EXPECT_DOUBLE_EQ(mfu_flops_per_token(s, 1024), 803478528.0);
  EXPECT_DOUBLE_EQ(train_flops_per_token(s, 1024), 854654976.0);
}

// The activation bytes of each setting, written out by hand for one shape: N = B T rows,
// C channels, blocks of T x T attention probabilities, `heads` of them in flight.
TEST(Gpt2Recompute, ActivationBytesFollowTheFormula) {
  const ModelShape shape{4, 32, 4, 16, 50, 64};
  const int B = 3;
  const std::size_t N = 3 * 16, C = 32, L = 4, NH = 4, TT = 16 * 16, Vp = 64;
  for (const int heads : {1, 2, 12}) {
    // The embedding output, the final norm and its statistics, logits, losses, the projection
    // output, dres dtmp datty, dqkv, the probabilities' gradient and two MLP-wide scratches.
    const std::size_t shared = N * C + N * C + 2 * N + N * Vp + N + N * C + 3 * N * C + 3 * N * C + heads * TT + 8 * N * C;
    const std::size_t none = L * (16 * N * C + 4 * N + B * NH * TT) + shared;
    const std::size_t selective = L * (12 * N * C + 4 * N) + heads * TT + shared;
    const std::size_t full = L * N * C + (11 * N * C + 4 * N + heads * TT) + shared;
    for (const bool device : {false, true}) {  // GPT-2's attention needs the same on either
      EXPECT_EQ(activation_sizes(shape, B, Recompute::none, heads, device).total(), none);
      EXPECT_EQ(activation_sizes(shape, B, Recompute::selective, heads, device).total(), selective);
      EXPECT_EQ(activation_sizes(shape, B, Recompute::full, heads, device).total(), full);
    }
    EXPECT_LT(full, selective);
    EXPECT_LT(selective, none);
  }
  // The model allocates exactly that, with the heads its backend works on at once.
  for (const Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
    Gpt2<float> model(shape, B, host_exec(), r);
    const int heads = host_exec().layer_kernels().attention_heads_at_once(B, 4);
    EXPECT_EQ(model.activation_bytes(), activation_sizes(shape, B, r, heads, false).bytes(4, 4)) << recompute_name(r);
  }
}

// With flash attention (a GPU in bf16) no setting keeps T x T blocks: each block keeps a
// log-sum-exp per row and head (N NH), the backward scratch holds each row's <dO, O> (N NH)
// instead of a probability gradient per head in flight, and `selective` drops the GELU output
// alone. Written out by hand, then the model built on a backend that runs flash attention
// carves exactly that (its constructor checks the carving against the formula).
TEST(Gpt2Recompute, FlashAttentionKeepsALogSumExpPerRowInstead) {
  const ModelShape shape{4, 128, 4, 16, 50, 64};  // head width 32: one flash attention has kernels for
  const int B = 3;
  const std::size_t N = 3 * 16, C = 128, L = 4, NH = 4, Vp = 64;
  const std::size_t shared = N * C + N * C + 2 * N + N * Vp + N + N * C + 3 * N * C + 3 * N * C + N * NH + 8 * N * C;
  const std::size_t none = L * (16 * N * C + 4 * N + N * NH) + shared;
  const std::size_t selective = L * (12 * N * C + 4 * N + N * NH) + shared;
  const std::size_t full = L * N * C + (11 * N * C + 4 * N + N * NH) + shared;
  for (const int heads : {1, 12}) {  // no T x T block in flight: the heads do not count
    EXPECT_EQ(activation_sizes(shape, B, Recompute::none, heads, true, 1, false, true).total(), none);
    EXPECT_EQ(activation_sizes(shape, B, Recompute::selective, heads, true, 1, false, true).total(), selective);
    EXPECT_EQ(activation_sizes(shape, B, Recompute::full, heads, true, 1, false, true).total(), full);
  }
  testing_support::FlashCarvingExec exec;
  for (const Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
    Gpt2<float> model(shape, B, exec, r);
    EXPECT_EQ(model.activation_bytes(), activation_sizes(shape, B, r, 1, true, 1, false, true).bytes(4, 4))
        << recompute_name(r);
  }
  // A head width without a kernel (8) keeps the exact path's sizes on the same backend.
  const ModelShape narrow{4, 32, 4, 16, 50, 64};
  Gpt2<float> exact_model(narrow, B, exec);
  EXPECT_EQ(exact_model.activation_bytes(),
            activation_sizes(narrow, B, Recompute::none, exec.layer_kernels().attention_heads_at_once(B, 4), true)
                .bytes(4, 4));
  // GPT-2 124M, 16 sequences of 1024 on a GPU in bf16: the probabilities (12 layers x 16 x 12 x
  // 1024^2 floats) and the 12 heads' blocks of their gradient give way to 2 x 12 x 16 x 12 x 1024
  // floats of log-sum-exp and one block of row dots.
  const ModelShape gpt2{12, 768, 12, 1024, 50257, 50304};
  const std::size_t exact = activation_sizes(gpt2, 16, Recompute::none, 12, true).total() * sizeof(float);
  const std::size_t flash = activation_sizes(gpt2, 16, Recompute::none, 12, true, 1, false, true).total() * sizeof(float);
  const std::size_t rows = 16 * 1024 * 12, TT = std::size_t{1024} * 1024;
  EXPECT_EQ(exact - flash, sizeof(float) * (12 * (16 * 12 * TT - rows) + 12 * TT - rows));
  EXPECT_NEAR(static_cast<double>(exact - flash) / (1 << 30), 9.04, 0.01);
}

}  // namespace
}  // namespace st
