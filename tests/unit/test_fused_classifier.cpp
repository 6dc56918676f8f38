// The models' fused classifier (model/model.hpp lm_head, cross_entropy, lm_head_backward) on the
// CPU: a model built on a host backend that claims the fused path, as a CUDA device in bf16 does
// (tests/unit/fused_classifier_exec.hpp), stores bf16 logits and trains through the host
// reference of the fused kernels. Against the same model on the host's unfused path: the loss and
// every gradient within what the bf16 roundings of the head allow; recomputation bit for bit;
// decoding and probs() from bf16 logits; and the activations it allocates, which are what
// activation_sizes predicts for bf16 logits (half the logits' bytes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "fused_classifier_exec.hpp"
#include "small_models.hpp"
#include "model/activations.hpp"
#include "model/model.hpp"

namespace st {
namespace {

using testing_support::small_shape;
using testing_support::tokens_for;
using testing_support::train_passes;
using testing_support::Variant;
using testing_support::variant_name;
using Result = testing_support::TrainedPasses;

class FusedClassifier : public ::testing::TestWithParam<Variant> {};

// bf16 logits move each by at most 2^-9 relative and the loss by a fraction of that; the head's
// operands and d(loss)/d(logits) are rounded to bf16 too, so the head's gradients and the input
// gradient that flows into the blocks move by a few 2^-9: 2e-2 of each tensor's largest gradient
// (measured: at most 4.8e-3 here), the losses 1e-3 relative (measured: below 2e-4). A fault in the
// wiring (a scale applied twice or not at all, a transposed product, a slice out of place) moves
// them by their own size.
TEST_P(FusedClassifier, TrainingMatchesTheUnfusedModel) {
  const ModelShape shape = small_shape(GetParam());
  const int B = 3, T = 9;
  testing_support::FusedClassifierExec exec;
  const auto unfused = make_model<float>(shape, B);
  const auto fused = make_model<float>(shape, B, exec);
  EXPECT_FALSE(unfused->bf16_logits());
  EXPECT_TRUE(fused->bf16_logits());
  const std::vector<float> params = testing_support::perturbed_params(*unfused);
  const Result want = train_passes(*unfused, params, B, T);
  const Result got = train_passes(*fused, params, B, T);
  for (std::size_t i = 0; i < want.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-3 * want.losses[i]) << "micro-batch " << i;
  const double worst_share = testing_support::expect_gradients_within(unfused->layout(), got.grads, want.grads, 2e-2);
  // The bf16 roundings are there: the fused path is not the unfused one under another name.
  EXPECT_GT(worst_share, 1e-6);
}

// Recomputation on the fused path, as on the unfused one: the same kernels on the same inputs,
// so the same losses and gradients, bit for bit.
TEST_P(FusedClassifier, RecomputationGivesTheSameBits) {
  const ModelShape shape = small_shape(GetParam());
  const int B = 3, T = 9;
  testing_support::FusedClassifierExec exec;
  const auto keep_all = make_model<float>(shape, B, exec);
  const std::vector<float> params = testing_support::perturbed_params(*keep_all);
  const Result want = train_passes(*keep_all, params, B, T);
  for (const Recompute r : {Recompute::selective, Recompute::full}) {
    const auto model = make_model<float>(shape, B, exec, r);
    const Result got = train_passes(*model, params, B, T);
    EXPECT_EQ(got.losses, want.losses) << recompute_name(r);
    EXPECT_TRUE(got.grads == want.grads) << recompute_name(r) << ": gradients differ";
    EXPECT_LT(model->activation_bytes(), keep_all->activation_bytes()) << recompute_name(r);
  }
}

// Passes without targets keep probabilities, in bf16 on the fused path: decoding a prompt and
// then a token at a time, and probs() after a full forward, give the unfused model's
// probabilities, each a distribution (its sum within 1e-2 of 1: one rounding per entry), and
// logits() gives bf16 values. The head's operands are rounded to bf16 (2^-8 relative on each
// product), which over its C-long sums moves a logit by about 2^-8 sqrt(C) of the largest
// product, and a probability by as much relative to itself: the bound, as in the device's kernel
// tests, is 2^-7 sqrt(C) of the largest (measured: 4e-3 for logits, 8e-3 for probabilities,
// against 3.8e-2).
TEST_P(FusedClassifier, DecodingProbsAndLogitsFromBf16Logits) {
  const ModelShape shape = small_shape(GetParam());
  const int V = static_cast<int>(shape.vocab_size), T = static_cast<int>(shape.seq_len);
  const double bound = std::ldexp(1.0, -7) * std::sqrt(static_cast<double>(shape.d_model));
  testing_support::FusedClassifierExec exec;
  const auto unfused = make_model<float>(shape, 2);
  const auto fused = make_model<float>(shape, 2, exec);
  const std::vector<float> params = testing_support::perturbed_params(*unfused);
  const auto tokens = tokens_for(2 * T, V, 3);
  auto worst = [](std::span<const float> got, std::span<const float> want) {
    double diff = 0, largest = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
      largest = std::max(largest, std::abs(static_cast<double>(want[i])));
    }
    return diff / largest;
  };
  FlatBuffers<float> unfused_params(unfused->layout(), params), fused_params(fused->layout(), params);
  int fed = 0;
  for (const int count : {4, 1, 1, 3}) {
    const auto w = unfused->decode(unfused_params, tokens.data() + fed, count);
    const std::vector<float> want(w.begin(), w.end());
    const auto g = fused->decode(fused_params, tokens.data() + fed, count);
    fed += count;
    ASSERT_EQ(g.size(), static_cast<std::size_t>(V));
    EXPECT_LE(worst(g, want), bound) << "after " << fed << " positions";
    double sum = 0;
    for (const float p : g) sum += p;
    EXPECT_NEAR(sum, 1.0, 1e-2) << "after " << fed << " positions";
  }
  unfused->forward(std::span<const float>(params), tokens.data(), nullptr, 2, T);
  fused->forward(std::span<const float>(params), tokens.data(), nullptr, 2, T);
  for (const auto& [b, t] : {std::pair{0, 0}, std::pair{1, T - 1}, std::pair{1, 2}})
    EXPECT_LE(worst(fused->probs(b, t), unfused->probs(b, t)), bound) << "probs(" << b << ", " << t << ")";
  const std::vector<float> want = unfused->logits(params, tokens.data(), 2, T);
  const std::vector<float> got = fused->logits(params, tokens.data(), 2, T);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LE(worst(got, want), bound);
  for (const float x : got) EXPECT_EQ(x, to_float(to_bf16(x))) << "a logit that is not a bf16 value";
}

INSTANTIATE_TEST_SUITE_P(EveryArchitecture, FusedClassifier,
                         ::testing::Values(Variant::gpt2, Variant::llama, Variant::llama_tied),
                         [](const auto& param_info) { return std::string(variant_name(param_info.param)); });

// The logits are N x Vp bf16 values: half the 4-byte elements of fp32 ones, rounded up, and
// nothing else moves. The models carve exactly that (their constructors check the carving
// against activation_sizes) under every recomputation setting. GPT-2 124M, 16 sequences of 1024:
// 16 x 1024 x 50304 logits, 3.07 GiB in fp32, 1.54 GiB in bf16.
TEST(FusedClassifierMemory, LogitsTakeHalfTheBytes) {
  testing_support::FusedClassifierExec exec;
  for (const Variant v : {Variant::gpt2, Variant::llama}) {
    const ModelShape shape = small_shape(v);
    const int B = 3;
    const std::size_t logits = static_cast<std::size_t>(B) * shape.seq_len * shape.padded_vocab;
    for (const Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
      const int heads = exec.layer_kernels().attention_heads_at_once(B, static_cast<int>(shape.n_head));
      const ActivationSizes fp32 = activation_sizes(shape, B, r, heads, false);
      const ActivationSizes bf16 = activation_sizes(shape, B, r, heads, false, 1, false, false, true);
      EXPECT_EQ(fp32.all().values - bf16.all().values, logits) << variant_name(v) << ", " << recompute_name(r);
      EXPECT_EQ(bf16.all().bf16, logits) << variant_name(v) << ", " << recompute_name(r);
      const auto model = make_model<float>(shape, B, exec, r);
      EXPECT_EQ(model->activation_bytes(), bf16.bytes(4, 4)) << variant_name(v) << ", " << recompute_name(r);
      const auto host = make_model<float>(shape, B, host_exec(), r);
      EXPECT_EQ(host->activation_bytes(), fp32.bytes(4, 4)) << variant_name(v) << ", " << recompute_name(r);
      // Half the logits' bytes, give or take the alignment of the runs.
      const double saved = static_cast<double>(fp32.bytes(4, 4)) - static_cast<double>(bf16.bytes(4, 4));
      EXPECT_NEAR(saved, 2.0 * static_cast<double>(logits), 2.0 * ActivationCount::kActivationRunAlignment);
    }
  }
  EXPECT_EQ(logit_count(3, 5, true).bytes(4, 4), 30u);  // 15 bf16 values
  EXPECT_EQ(logit_count(3, 5, false).bytes(4, 4), 256u);  // 15 fp32 values, a run of 256 aligned bytes
  const ModelShape gpt2{12, 768, 12, 1024, 50257, 50304};
  const std::size_t fp32 = activation_sizes(gpt2, 16, Recompute::none, 12, true, 1, false, true).bytes(4, 4);
  const std::size_t bf16 = activation_sizes(gpt2, 16, Recompute::none, 12, true, 1, false, true, true).bytes(4, 4);
  EXPECT_EQ(fp32 - bf16, std::size_t{2} * 16 * 1024 * 50304);
  EXPECT_NEAR(static_cast<double>(fp32 - bf16) / (1 << 30), 1.535, 0.001);
}

}  // namespace
}  // namespace st
