// The whole model on the GPU against the host, GPT-2 and Llama (grouped-query attention, 4 query
// heads over 2 key/value heads, an LM head of its own): the same parameters (the architecture's
// initialisation, then perturbed so no gradient path is trivially zero) and batch; the loss and
// every parameter tensor's gradient must agree, fp32 within 1e-4 relative, bf16 matmuls within a
// bound from bf16's precision. Recomputation and decoding likewise. Skips, saying why, where no
// CUDA device is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/random.hpp"
#include "exec/cuda/cuda_exec.hpp"
#include "exec/cuda/cuda_layer_kernels.hpp"
#include "exec/cuda/device_scratch.hpp"
#include "exec/kernel_scratch.hpp"
#include "model/activations.hpp"
#include "model/model.hpp"
#include "runtime/device_choice.hpp"

namespace st {
namespace {

struct Result {
  double loss = 0;
  std::vector<float> grads;
};

// GPT-2: odd vocabulary, padded.
ModelShape gpt2_shape() { return ModelShape{3, 48, 4, 24, 61, 64}; }

// Llama: hs = 12, 4 query heads over 2 key/value heads, SwiGLU 40 wide, untied head.
ModelShape llama_shape() {
  ModelShape s{3, 48, 4, 24, 61, 64};
  s.arch = Arch::llama;
  s.n_kv_head = 2;
  s.ffn_dim = 40;
  s.tie_embeddings = false;
  s.rope_theta = 500.0;  // small: positions turn the heads visibly within 24 steps
  return s;
}

// The same with heads 32 wide, which flash attention has kernels for (the shapes above, 12 wide,
// take the exact path in bf16 too).
ModelShape gpt2_flash_shape() { return ModelShape{3, 64, 2, 24, 61, 64}; }
ModelShape llama_flash_shape() {
  ModelShape s = llama_shape();
  s.d_model = 128;  // 4 query heads over 2 key/value heads, 32 wide
  return s;
}

std::string name_of(const ModelShape& shape) {
  return std::string(arch_name(shape.arch)) + " (head width " + std::to_string(shape.head_dim()) + ")";
}

// Two micro-batches accumulated, as a step with accumulation does.
Result run(Model<float>& model, Exec& exec, const std::vector<float>& params, const std::vector<int>& tokens,
           const std::vector<int>& targets, int B, int T) {
  Memory p = exec.allocate(params.size() * sizeof(float)), g = exec.allocate(params.size() * sizeof(float));
  exec.upload(p.data(), params.data(), params.size() * sizeof(float));
  const std::span<const float> ps(static_cast<const float*>(p.data()), params.size());
  const std::span<float> gs(static_cast<float*>(g.data()), params.size());
  Result r;
  for (int micro = 0; micro < 2; ++micro) {
    const std::size_t at = static_cast<std::size_t>(micro) * B * T;
    r.loss += model.forward(ps, tokens.data() + at, targets.data() + at, B, T);
    model.backward(ps, gs, 0.5f);
  }
  r.grads.resize(params.size());
  exec.download(r.grads.data(), g.data(), params.size() * sizeof(float));
  return r;
}

void compare_model(const ModelShape& shape, bool bf16_matmuls, double bound, bool flash = false,
                   bool gelu_fusion = false) {
  std::string why;
  if (visible_cuda_devices(why) == 0) GTEST_SKIP() << "no usable CUDA device: " << why;
  const int B = 3, T = 24;
  const auto host = make_model<float>(shape, B);
  CudaExecSettings settings;
  settings.bf16_matmuls = bf16_matmuls;
  settings.flash_attention = flash;
  settings.gelu_fusion = gelu_fusion;
  const std::size_t held_before = DeviceScratch::held_bytes(), grown_before = DeviceScratch::grown_after_reserve();
  CudaExec exec(settings);
  const auto device = make_model<float>(shape, B, exec);
  // The model reserved its kernels' scratch as kernel_scratch sizes it (cub's sort figure aside,
  // which only the device knows), and the blocks hold that much.
  const auto& kernels = dynamic_cast<const CudaLayerKernels&>(exec.layer_kernels());
  const KernelScratch reserved = kernels.reserved_scratch();
  KernelScratchChoices choices;
  choices.bf16_matmuls = bf16_matmuls;
  choices.fused_classifier = device->bf16_logits();
  choices.sort_temp_bytes = reserved.sort_temp;
  const KernelScratch sized = kernel_scratch(kernel_workload(shape, B, 1, false, ModelPart{}), choices);
  EXPECT_EQ(reserved.reserved(), sized.reserved()) << name_of(shape);
  EXPECT_GT(reserved.sort_temp, 0u) << name_of(shape);
  EXPECT_EQ(DeviceScratch::held_bytes() - held_before, reserved.reserved()) << name_of(shape);
  // The device carves what its attention keeps (with flash attention a log-sum-exp per row) and
  // its logits: bf16 ones, with the fused classifier, in bf16.
  const bool uses_flash = exec.layer_kernels().attention_uses_flash(static_cast<int>(shape.head_dim()));
  EXPECT_EQ(uses_flash, flash) << name_of(shape);
  EXPECT_EQ(device->bf16_logits(), bf16_matmuls) << name_of(shape);
  EXPECT_EQ(device->activation_bytes(),
            activation_sizes(shape, B, Recompute::none,
                             exec.layer_kernels().attention_heads_at_once(B, static_cast<int>(shape.n_head)), true, 1,
                             false, uses_flash, bf16_matmuls)
                .bytes(4, 4))
      << name_of(shape);
  std::vector<float> params(host->layout().total());
  host->init_params(params, 7);
  NormalStream noise(11, 3);
  for (float& p : params) p += static_cast<float>(0.05 * noise.next());
  std::vector<int> tokens(2 * B * T), targets(2 * B * T);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int>(noise.next_bits() % shape.vocab_size);
    targets[i] = static_cast<int>(noise.next_bits() % shape.vocab_size);
  }
  const Result want = run(*host, host->exec(), params, tokens, targets, B, T);
  const Result got = run(*device, exec, params, tokens, targets, B, T);
  EXPECT_NEAR(got.loss, want.loss, bound * std::abs(want.loss)) << name_of(shape) << ": loss";
  for (const TensorSlot* t : host->layout().all_tensors()) {
    double scale = 1e-12, worst = 0;
    for (std::size_t i = t->offset; i < t->offset + t->size; ++i) {
      scale = std::max(scale, static_cast<double>(std::abs(want.grads[i])));
      worst = std::max(worst, static_cast<double>(std::abs(got.grads[i] - want.grads[i])));
    }
    EXPECT_GT(scale, 1e-12) << name_of(shape) << ": " << t->name << " receives no gradient on the host";
    EXPECT_LE(worst / scale, bound) << name_of(shape) << ": " << t->name << ": largest gradient difference " << worst
                                    << " against " << scale;
  }
  // Two forward and backward passes asked for no more scratch than was reserved.
  EXPECT_EQ(DeviceScratch::grown_after_reserve(), grown_before) << name_of(shape) << ": scratch grew inside a step";
  EXPECT_EQ(DeviceScratch::held_bytes() - held_before, reserved.reserved()) << name_of(shape);
  // The path asked for is the path taken: the GELU in cuBLASLt's epilogues (both passes, each
  // block), or never.
  const std::size_t blocks = gelu_fusion && shape.arch == Arch::gpt2 ? shape.n_layer : 0;
  EXPECT_GE(kernels.epilogue_runs(LtEpilogue::gelu_aux_bias), 2 * blocks) << name_of(shape);
  EXPECT_GE(kernels.epilogue_runs(LtEpilogue::dgelu), 2 * blocks) << name_of(shape);
  if (blocks == 0) {
    EXPECT_EQ(kernels.epilogue_runs(LtEpilogue::gelu_aux_bias), 0u) << name_of(shape);
    EXPECT_EQ(kernels.epilogue_runs(LtEpilogue::dgelu), 0u) << name_of(shape);
  }
}

TEST(GpuModel, LossAndEveryGradientMatchTheHostFp32) { compare_model(gpt2_shape(), false, 1e-4); }

// bf16 inputs to every matmul: each product off by at most 2^-7 relative, accumulated over the
// model's depth (a few matmuls in series per gradient): 5e-2 of the tensor's scale. The fused
// classifier's bf16 logits and d(loss)/d(logits) add one rounding (2^-9) each at the head, well
// inside it (on the host, its reference moved the gradients by at most 4.8e-3 of their scale:
// tests/unit/test_fused_classifier.cpp).
TEST(GpuModel, LossAndEveryGradientMatchTheHostBf16Matmuls) { compare_model(gpt2_shape(), true, 5e-2); }

// GPT-2's GELU in cuBLASLt's epilogues (parallel.gelu_fusion): its tanh is within 1e-4 of the
// host's, far inside the bf16 bound.
TEST(GpuModel, LossAndEveryGradientMatchTheHostWithGeluFusion) { compare_model(gpt2_shape(), true, 5e-2, false, true); }

TEST(GpuModel, LlamaLossAndEveryGradientMatchTheHostFp32) { compare_model(llama_shape(), false, 1e-4); }
TEST(GpuModel, LlamaLossAndEveryGradientMatchTheHostBf16Matmuls) { compare_model(llama_shape(), true, 5e-2); }

// Flash attention adds roundings of the same size to attention's products (the probabilities
// and their gradient to bf16, as the matmuls' operands are): the same bound.
TEST(GpuModel, LossAndEveryGradientMatchTheHostWithFlashAttention) {
  compare_model(gpt2_flash_shape(), true, 5e-2, true);
}
TEST(GpuModel, LlamaLossAndEveryGradientMatchTheHostWithFlashAttention) {
  compare_model(llama_flash_shape(), true, 5e-2, true);
}

// Activation recomputation on the device runs the same kernels on the same inputs in the same
// stream order, so the loss and gradients equal the run that keeps everything; cuBLAS may pick
// its algorithm by the buffers' alignment, which differs between the two, so the bound is 1e-6
// of each tensor's scale rather than bit for bit. In fp32 and with bf16 matmuls; the device
// holds less.
void check_recomputation(const ModelShape& shape) {
  std::string why;
  if (visible_cuda_devices(why) == 0) GTEST_SKIP() << "no usable CUDA device: " << why;
  const int B = 3, T = 24;
  NormalStream noise(5, 9);
  std::vector<int> tokens(2 * B * T), targets(2 * B * T);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int>(noise.next_bits() % shape.vocab_size);
    targets[i] = static_cast<int>(noise.next_bits() % shape.vocab_size);
  }
  for (const auto& [bf16_matmuls, flash] : {std::pair{false, false}, std::pair{true, false}, std::pair{true, true}}) {
    CudaExec exec(CudaExecSettings{0, bf16_matmuls, flash});
    const auto keep_all = make_model<float>(shape, B, exec);
    std::vector<float> params(keep_all->layout().total());
    keep_all->init_params(params, 7);
    const Result want = run(*keep_all, exec, params, tokens, targets, B, T);
    for (const Recompute r : {Recompute::selective, Recompute::full}) {
      const auto model = make_model<float>(shape, B, exec, r);
      const Result got = run(*model, exec, params, tokens, targets, B, T);
      const std::string what = name_of(shape) + ", " + recompute_name(r) + (bf16_matmuls ? ", bf16 matmuls" : "") +
                               (exec.layer_kernels().attention_uses_flash(static_cast<int>(shape.head_dim()))
                                    ? ", flash attention"
                                    : "");
      EXPECT_NEAR(got.loss, want.loss, 1e-6 * std::abs(want.loss)) << what;
      double scale = 1e-12, worst = 0;
      for (std::size_t i = 0; i < want.grads.size(); ++i) {
        scale = std::max(scale, static_cast<double>(std::abs(want.grads[i])));
        worst = std::max(worst, static_cast<double>(std::abs(got.grads[i] - want.grads[i])));
      }
      EXPECT_LE(worst / scale, 1e-6) << what << ": largest gradient difference " << worst;
      EXPECT_LT(model->activation_bytes(), keep_all->activation_bytes()) << what;
    }
  }
}

TEST(GpuModel, RecomputationGivesTheSameLossAndGradientsBitForBit) { check_recomputation(gpt2_shape()); }
TEST(GpuModel, LlamaRecomputationGivesTheSameLossAndGradients) { check_recomputation(llama_shape()); }
// With flash attention no setting keeps probabilities (model/activations.hpp): the recomputed
// runs still equal the one that keeps everything.
TEST(GpuModel, RecomputationWithFlashAttentionGivesTheSameLossAndGradients) {
  check_recomputation(gpt2_flash_shape());
  check_recomputation(llama_flash_shape());
}

// Incremental decoding on the device: after a prompt and then a few tokens at a time, the
// next-token probabilities equal the host's decoding of the same tokens, and the device's own
// full forward pass over all the tokens fed so far (fp32, 1e-5 of the largest probability). In
// bf16 the device decodes from bf16 logits through the fused classifier's softmax: bf16 matmuls'
// bound, 5e-2 (against its own full forward too: the two sum their products in other orders, so
// a logit may round to the neighbouring bf16 value), and each distribution sums to 1 within 1e-2.
void check_decoding(const ModelShape& shape, bool bf16 = false) {
  std::string why;
  if (visible_cuda_devices(why) == 0) GTEST_SKIP() << "no usable CUDA device: " << why;
  const double bound = bf16 ? 5e-2 : 1e-5;
  const auto host = make_model<float>(shape, 1, host_exec(), Recompute::full);
  CudaExec exec(CudaExecSettings{0, bf16});
  const auto device = make_model<float>(shape, 1, exec, Recompute::full);
  const auto full = make_model<float>(shape, 1, exec);
  EXPECT_EQ(device->bf16_logits(), bf16) << name_of(shape);
  std::vector<float> params(host->layout().total());
  host->init_params(params, 13);
  NormalStream noise(17, 4);
  for (float& p : params) p += static_cast<float>(0.1 * noise.next());
  Memory on_device = exec.allocate(params.size() * sizeof(float));
  exec.upload(on_device.data(), params.data(), params.size() * sizeof(float));
  const std::span<const float> device_span(static_cast<const float*>(on_device.data()), params.size());
  FlatBuffers<float> host_params(host->layout(), params);
  FlatBuffers<float> device_params(device->layout(), device_span);
  std::vector<int> tokens(shape.seq_len);
  for (int& t : tokens) t = static_cast<int>(noise.next_bits() % shape.vocab_size);
  auto worst_of = [](const std::vector<float>& got, std::span<const float> want) {
    double worst = 0, scale = 0;
    for (std::size_t v = 0; v < want.size(); ++v) {
      worst = std::max(worst, std::abs(static_cast<double>(got[v]) - want[v]));
      scale = std::max(scale, static_cast<double>(want[v]));
    }
    return worst / scale;
  };
  int fed = 0;
  for (const int count : {5, 1, 1, 1, 7, 1}) {
    const auto h = host->decode(host_params, tokens.data() + fed, count);
    const std::vector<float> want(h.begin(), h.end());
    const auto d = device->decode(device_params, tokens.data() + fed, count);
    const std::vector<float> got(d.begin(), d.end());
    fed += count;
    EXPECT_LE(worst_of(got, want), bound) << name_of(shape) << ": against the host after " << fed << " positions";
    full->forward(device_span, tokens.data(), nullptr, 1, fed);
    EXPECT_LE(worst_of(got, full->probs(0, fed - 1)), bound)
        << name_of(shape) << ": against the full forward after " << fed << " positions";
    double sum = 0;
    for (const float p : got) sum += p;
    EXPECT_NEAR(sum, 1.0, bf16 ? 1e-2 : 1e-5) << name_of(shape) << " after " << fed << " positions";
  }
}

TEST(GpuModel, DecodingMatchesTheHost) { check_decoding(gpt2_shape()); }
TEST(GpuModel, LlamaDecodingWithAGroupedQueryCacheMatchesTheHostAndTheFullForward) { check_decoding(llama_shape()); }
TEST(GpuModel, DecodingInBf16FromBf16LogitsMatchesTheHost) {
  check_decoding(gpt2_shape(), true);
  check_decoding(llama_shape(), true);
}

}  // namespace
}  // namespace st
