// The models with bf16 storage (Model<float, Bf16>: bf16 parameters and activations, fp32
// gradients and statistics) on the host reference's kernels (exec/host_bf16_kernels.hpp): what a
// GPU in bf16 is tested against. Against the fp32 model with the same fused classifier on the
// same bf16 parameters, the only difference is where activations are stored, so the losses and
// gradients agree within what those roundings allow; recomputation gives the same bits; the
// gradients accumulate in fp32; decoding works from bf16 caches; and the activations take the
// bytes activation_sizes predicts: two per value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "fused_classifier_exec.hpp"
#include "small_models.hpp"
#include "exec/host_bf16_kernels.hpp"
#include "exec/host_exec.hpp"
#include "exec/kernel_scratch.hpp"
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

// The architecture's initialisation, perturbed so that logits spread and no gradient is trivial,
// rounded to bf16: the parameters both models compute with (bf16, and the same values in fp32).
struct Params {
  std::vector<Bf16> bf16;
  std::vector<float> fp32;
};
Params params_for(const Model<float>& model) {
  Params p;
  for (float x : testing_support::perturbed_params(model)) {
    p.bf16.push_back(to_bf16(x));
    p.fp32.push_back(to_float(p.bf16.back()));
  }
  return p;
}

class Bf16Storage : public ::testing::TestWithParam<Variant> {};

// Every kernel rounds what it stores to bf16 (2^-9 relative at most), and a block stores about a
// dozen tensors on the way from its input to its output: the loss moves by a few 2^-9 relative
// at these depths (measured: at most 9e-4 relative here; bound 1e-2). The gradients flow back
// through as many stored tensors again and through the differences of nearly equal terms
// (normalisation, softmax), so each tensor's worst element moves by a few percent of that
// tensor's largest gradient (measured: at most 3.6e-2, Llama's; bound 1e-1). A fault in the
// wiring (a gradient into the wrong buffer, a scale lost, a statistic stored as a value) moves
// them by their own size.
TEST_P(Bf16Storage, TrainingMatchesFp32WithinTheRoundingsOfStorage) {
  const ModelShape shape = small_shape(GetParam());
  const int B = 3, T = 9;
  testing_support::FusedClassifierExec fused_fp32;
  const auto fp32 = make_model<float>(shape, B, fused_fp32);
  const auto bf16 = make_model<float, Bf16>(shape, B);
  EXPECT_TRUE(bf16->bf16_logits());
  const Params params = params_for(*fp32);
  const Result want = train_passes(*fp32, params.fp32, B, T);
  const Result got = train_passes(*bf16, params.bf16, B, T);
  double worst_loss = 0;
  for (std::size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-2 * want.losses[i]) << "micro-batch " << i;
    worst_loss = std::max(worst_loss, std::abs(got.losses[i] - want.losses[i]) / want.losses[i]);
  }
  const double worst_share = testing_support::expect_gradients_within(fp32->layout(), got.grads, want.grads, 1e-1);
  // The roundings are there: bf16 storage is not fp32 under another name.
  EXPECT_GT(worst_share, 1e-4);
  EXPECT_GT(worst_loss, 1e-6);
}

// Gradients are fp32 and accumulate in fp32: a step's gradients added to 1.0 keep all but fp32's
// last bit of them, where a bf16 sum (a unit of 2^-7 at 1) would lose most of them.
TEST_P(Bf16Storage, GradientsAccumulateInFp32) {
  const ModelShape shape = small_shape(GetParam());
  const int B = 3, T = 9;
  const auto model = make_model<float, Bf16>(shape, B);
  testing_support::FusedClassifierExec fused_fp32;
  const Params params = params_for(*make_model<float>(shape, B, fused_fp32));
  const Result fresh = train_passes(*model, params.bf16, B, T);
  const Result on_one = train_passes(*model, params.bf16, B, T, 1.0f);
  EXPECT_EQ(on_one.losses, fresh.losses);
  std::size_t large = 0;
  for (std::size_t i = 0; i < fresh.grads.size(); ++i) {
    ASSERT_NEAR(on_one.grads[i] - 1.0f, fresh.grads[i], 4e-7) << "gradient " << i;
    if (std::abs(fresh.grads[i]) > 1e-2) ++large;
  }
  EXPECT_GT(large, fresh.grads.size() / 10) << "too few gradients large enough for a bf16 sum to show";
}

// The same kernels on the same stored inputs: recomputing in backward gives the bits that keeping
// gave, and keeps less.
TEST_P(Bf16Storage, RecomputationGivesTheSameBits) {
  const ModelShape shape = small_shape(GetParam());
  const int B = 3, T = 9;
  const auto keep_all = make_model<float, Bf16>(shape, B);
  testing_support::FusedClassifierExec fused_fp32;
  const Params params = params_for(*make_model<float>(shape, B, fused_fp32));
  const Result want = train_passes(*keep_all, params.bf16, B, T);
  for (const Recompute r : {Recompute::selective, Recompute::full}) {
    const auto model = make_model<float, Bf16>(shape, B, host_exec(), r);
    const Result got = train_passes(*model, params.bf16, B, T);
    EXPECT_EQ(got.losses, want.losses) << recompute_name(r);
    EXPECT_TRUE(got.grads == want.grads) << recompute_name(r) << ": gradients differ";
    EXPECT_LT(model->activation_bytes(), keep_all->activation_bytes()) << recompute_name(r);
  }
}

// Decoding a prompt and then a token at a time from bf16 keys and values gives the fp32 model's
// probabilities within the roundings of a pass (each kernel's output rounded once: the bound of
// the fused classifier's own test, 2^-7 sqrt(C) of the largest, doubled for the blocks' roundings
// before the head; measured at most 3.0e-2 against 7.7e-2), each a distribution.
TEST_P(Bf16Storage, DecodingFromBf16Caches) {
  const ModelShape shape = small_shape(GetParam());
  const int V = static_cast<int>(shape.vocab_size), T = static_cast<int>(shape.seq_len);
  const double bound = 2 * std::ldexp(1.0, -7) * std::sqrt(static_cast<double>(shape.d_model));
  testing_support::FusedClassifierExec fused_fp32;
  const auto fp32 = make_model<float>(shape, 2, fused_fp32);
  const auto bf16 = make_model<float, Bf16>(shape, 2);
  const Params params = params_for(*fp32);
  const auto tokens = tokens_for(2 * T, V, 3);
  FlatBuffers<float> fp32_params(fp32->layout(), params.fp32);
  FlatBuffers<float, Bf16> bf16_params(bf16->layout(), params.bf16);
  int fed = 0;
  for (const int count : {4, 1, 1, 3}) {
    const auto w = fp32->decode(fp32_params, tokens.data() + fed, count);
    const std::vector<float> want(w.begin(), w.end());
    const auto g = bf16->decode(bf16_params, tokens.data() + fed, count);
    fed += count;
    ASSERT_EQ(g.size(), static_cast<std::size_t>(V));
    double diff = 0, largest = 0, sum = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      diff = std::max(diff, std::abs(static_cast<double>(g[i]) - want[i]));
      largest = std::max(largest, static_cast<double>(want[i]));
      sum += g[i];
    }
    EXPECT_LE(diff / largest, bound) << "after " << fed << " positions";
    EXPECT_NEAR(sum, 1.0, 1e-2) << "after " << fed << " positions";
  }
}

INSTANTIATE_TEST_SUITE_P(EveryArchitecture, Bf16Storage,
                         ::testing::Values(Variant::gpt2, Variant::llama, Variant::llama_tied),
                         [](const auto& param_info) { return std::string(variant_name(param_info.param)); });

// Two bytes a value, four a statistic, two a logit: the model allocates what activation_sizes
// counts, and its values take half the bytes of fp32 ones.
TEST(Bf16StorageMemory, ValuesTakeTwoBytes) {
  for (const Variant v : {Variant::gpt2, Variant::llama}) {
    const ModelShape shape = small_shape(v);
    const int B = 3;
    for (const Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
      const auto model = make_model<float, Bf16>(shape, B, host_exec(), r);
      const int heads = host_exec().layer_kernels().attention_heads_at_once(B, static_cast<int>(shape.n_head));
      const ActivationSizes sizes = activation_sizes(shape, B, r, heads, false, 1, false, false, true);
      EXPECT_EQ(model->activation_bytes(), sizes.bytes(2, 4)) << variant_name(v) << ", " << recompute_name(r);
      testing_support::FusedClassifierExec fused_fp32;
      const auto fp32 = make_model<float>(shape, B, fused_fp32, r);
      EXPECT_EQ(fp32->activation_bytes(), sizes.bytes(4, 4)) << variant_name(v) << ", " << recompute_name(r);
      // Two bytes a value less, give or take the alignment of the runs.
      const ActivationCount all = sizes.all();
      const double saved = static_cast<double>(fp32->activation_bytes()) - static_cast<double>(model->activation_bytes());
      EXPECT_NEAR(saved, 2.0 * static_cast<double>(all.values), 2.0 * ActivationCount::kActivationRunAlignment)
          << variant_name(v) << ", " << recompute_name(r);
      EXPECT_GT(all.values, all.stats + all.bf16) << "values are most of the activations";
    }
  }
}

// The reference reserves its widening slots before the first step, at what host_bf16_slots counts
// (what check adds to a CPU rank's workspace), and nothing grows past them in training passes,
// under recomputation, or decoding.
TEST(Bf16StorageMemory, TheReferencesSlotsAreReservedAndDoNotGrow) {
  for (const Variant v : {Variant::gpt2, Variant::llama}) {
    for (const Recompute r : {Recompute::none, Recompute::full}) {
      HostExec exec;  // a backend of its own: its kernels' slots start empty
      auto& kernels = dynamic_cast<HostBf16LayerKernels&>(*exec.bf16_layer_kernels());
      // A vocabulary whose head weight (512 x 24) outgrows every activation's rows, as real ones do.
      ModelShape shape = small_shape(v);
      shape.vocab_size = 500;
      shape.padded_vocab = 512;
      const int B = 3, T = 9;
      const auto model = make_model<float, Bf16>(shape, B, exec, r);
      const HostBf16Slots want = host_bf16_slots(kernel_workload(shape, B, 1, false, ModelPart{}));
      const auto reserved = kernels.slot_elements();
      for (std::size_t i = 0; i < reserved.size(); ++i)
        EXPECT_EQ(reserved[i], want.elements[i]) << variant_name(v) << ", slot " << i;
      testing_support::FusedClassifierExec fused_fp32;
      const Params params = params_for(*make_model<float>(shape, B, fused_fp32));
      train_passes(*model, params.bf16, B, T);
      FlatBuffers<float, Bf16> buffers(model->layout(), params.bf16);
      const auto tokens = tokens_for(T, static_cast<int>(shape.vocab_size), 3);
      model->decode(buffers, tokens.data(), 4);
      model->decode(buffers, tokens.data() + 4, 1);
      EXPECT_EQ(kernels.slot_elements(), reserved) << variant_name(v) << ", " << recompute_name(r) << ": a slot grew";
    }
  }
}

}  // namespace
}  // namespace st
