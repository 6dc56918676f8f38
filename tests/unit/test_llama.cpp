// Llama: the layout and its published parameter counts, each kernel and the whole model against
// finite differences (grouped-query, multi-query and multi-head attention, tied and untied), the
// activation bytes. Recomputation, decoding and generation: tests/unit/test_models.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <vector>

#include "core/error.hpp"
#include "exec/host_kernels.hpp"
#include "exec/host_llama_kernels.hpp"
#include "exec/layer_kernels.hpp"
#include "flash_carving_exec.hpp"
#include "model/llama.hpp"
#include "model/layout.hpp"
#include "model/rope.hpp"
#include "model_gradient_check.hpp"

namespace st {
namespace {

ModelShape llama_shape(std::int64_t n_layer, std::int64_t d_model, std::int64_t n_head, std::int64_t n_kv_head,
                       std::int64_t ffn_dim, std::int64_t seq_len, std::int64_t vocab, std::int64_t padded,
                       bool tied = true, double rope_theta = 10000.0) {
  ModelShape s{n_layer, d_model, n_head, seq_len, vocab, padded};
  s.arch = Arch::llama;
  s.n_kv_head = n_kv_head;
  s.ffn_dim = ffn_dim;
  s.tie_embeddings = tied;
  s.rope_theta = rope_theta;
  return s;
}

std::vector<int> tokens_for(int B, int T, int V, int salt) {
  std::vector<int> t(static_cast<std::size_t>(B * T));
  for (std::size_t i = 0; i < t.size(); ++i)
    t[i] = static_cast<int>((i * 7 + static_cast<std::size_t>(salt) * 3 + 1) % static_cast<std::size_t>(V));
  return t;
}

TEST(LlamaLayout, PublishedParameterCounts) {
  // SmolLM2-135M (config.json: hidden 576, 30 layers, 9 heads, 3 KV heads, 1536, vocab 49152,
  // tied): transformers counts 134,515,008 parameters.
  EXPECT_EQ(make_layout(llama_shape(30, 576, 9, 3, 1536, 2048, 49152, 49152)).total(), 134515008u);
  // Llama 2 7B (32 heads, multi-head, untied, vocab 32000): 6,738,415,616.
  EXPECT_EQ(make_layout(llama_shape(32, 4096, 32, 32, 11008, 4096, 32000, 32000, false)).total(), 6738415616u);
  // Llama 3 8B (8 KV heads, untied, vocab 128256): 8,030,261,248.
  EXPECT_EQ(make_layout(llama_shape(32, 4096, 32, 8, 14336, 8192, 128256, 128256, false)).total(), 8030261248u);
}

TEST(LlamaLayout, FfnDimFollowsMetasRounding) {
  EXPECT_EQ(llama_ffn_dim(4096, 256), 11008);        // Llama 2 7B
  EXPECT_EQ(llama_ffn_dim(4096, 1024, 1.3), 14336);  // Llama 3 8B
  EXPECT_EQ(llama_ffn_dim(5120, 256), 13824);        // Llama 2 13B
}

TEST(LlamaLayout, SegmentsAndNames) {
  const ParamLayout tied = make_layout(llama_shape(2, 16, 4, 2, 40, 8, 30, 32));
  ASSERT_EQ(tied.segments().size(), 4u);
  EXPECT_EQ(tied.segments()[0].tensors.size(), 1u);  // wte only: no position table
  EXPECT_EQ(tied.tensor("block1.attn.qkv.w").shape, (std::vector<std::int64_t>{16 + 2 * 2 * 4, 16}));
  EXPECT_EQ(tied.tensor("block0.mlp.gate_up.w").shape, (std::vector<std::int64_t>{80, 16}));
  EXPECT_EQ(tied.tensor("block0.mlp.down.w").shape, (std::vector<std::int64_t>{16, 40}));
  const ParamLayout untied = make_layout(llama_shape(2, 16, 4, 2, 40, 8, 30, 32, false));
  EXPECT_EQ(untied.tensor("lm_head.w").shape, (std::vector<std::int64_t>{32, 16}));
  EXPECT_EQ(untied.total(), tied.total() + 32 * 16);
  EXPECT_THROW(tied.tensor("lm_head.w"), Error);
}

// Every parameter's gradient against central differences, in double precision, for grouped-
// query (untied, another rope_theta), multi-query and multi-head (tied) attention. The weights
// are scaled up so every path (positions included) contributes measurably.
TEST(LlamaModel, WholeModelGradientMatchesFiniteDifferences) {
  const ModelShape shapes[] = {
      llama_shape(2, 16, 4, 2, 24, 6, 11, 16, false, 500.0),  // GQA, untied
      llama_shape(1, 16, 4, 1, 20, 6, 11, 12),                // multi-query
      llama_shape(1, 12, 2, 2, 16, 6, 11, 11),                // multi-head
  };
  for (const ModelShape& shape : shapes) {
    const int B = 2, T = 5;
    Llama<double> model(shape, B);
    std::vector<double> params(model.layout().total());
    model.init_params(params, 42);
    for (auto& p : params) p *= 12.0;
    const auto tokens = tokens_for(B, T, static_cast<int>(shape.vocab_size), 0);
    const auto targets = tokens_for(B, T, static_cast<int>(shape.vocab_size), 1);
    expect_gradients_match_finite_differences(model, params, tokens, targets, B, T,
                                              "n_kv_head " + std::to_string(shape.n_kv_head));
  }
}

// Rotary embeddings make attention depend on relative position only: rotating q and k by
// positions m and n leaves <q, k> a function of m - n.
TEST(LlamaKernels, RopeDotProductsDependOnRelativePosition) {
  const int hs = 8, T = 12;
  const auto table = kernels::rope_table<double>(T, hs, 10000.0);
  std::vector<double> q(hs), k(hs);
  for (int i = 0; i < hs; ++i) {
    q[i] = std::sin(1.0 + i);
    k[i] = std::cos(2.0 * i + 0.5);
  }
  auto rotated_dot = [&](int m, int n) {
    std::vector<double> a = q, b = k;
    kernels::rope(a.data(), table, 1, 1, m, hs, 1, hs, false);
    kernels::rope(b.data(), table, 1, 1, n, hs, 1, hs, false);
    double dot = 0;
    for (int i = 0; i < hs; ++i) dot += a[i] * b[i];
    return dot;
  };
  EXPECT_NEAR(rotated_dot(5, 2), rotated_dot(9, 6), 1e-12);
  EXPECT_NEAR(rotated_dot(3, 3), rotated_dot(0, 0), 1e-12);
  EXPECT_GT(std::abs(rotated_dot(5, 2) - rotated_dot(5, 4)), 1e-3);  // another distance differs
  // The inverse undoes it.
  std::vector<double> a = q;
  kernels::rope(a.data(), table, 1, 1, 7, hs, 1, hs, false);
  kernels::rope(a.data(), table, 1, 1, 7, hs, 1, hs, true);
  for (int i = 0; i < hs; ++i) EXPECT_NEAR(a[i], q[i], 1e-14);
}

// Each kernel's backward against central differences of L = sum(out * g) for a fixed g, in
// double precision: d L / d input (and d L / d weight where there is one).
double worst_gradient_error(std::vector<double>& x, const std::vector<double>& analytic,
                            const std::function<double()>& loss) {
  const double h = 1e-6;
  double worst = 0, norm = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    const double numeric = (up - down) / (2 * h);
    worst = std::max(worst, std::abs(numeric - analytic[i]));
    norm = std::max(norm, std::abs(numeric));
  }
  EXPECT_GT(norm, 1e-3);  // the check can fail: the gradient is not zero
  return worst / std::max(1.0, norm);
}

std::vector<double> waves(std::size_t n, double phase) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::sin(0.7 * static_cast<double>(i) + phase) * (1.0 + 0.1 * (i % 5));
  return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

// Llama 3.1 8B's rotary frequencies (head width 128, rope_theta 500000, rope_scaling llama3 with
// factor 8, low_freq_factor 1, high_freq_factor 4, original context 8192): wavelengths below
// 8192 / 4 are kept bit for bit (i <= 28), those above 8192 / 1 divided by 8 (i >= 35), the six
// between blended, falling from 1 to 1/8 of their unscaled value as the wavelength grows.
TEST(LlamaRope, Llama3ScalingKeepsStretchesAndBlendsByWavelength) {
  ModelShape s = llama_shape(32, 4096, 32, 8, 14336, 8192, 128256, 128256, false, 500000.0);
  const std::vector<double> plain = rope_inverse_frequencies(s);
  ASSERT_EQ(plain.size(), 64u);
  for (std::size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(plain[i], std::pow(500000.0, -2.0 * i / 128)) << i;

  s.rope_scaling = RopeScaling::llama3;
  s.rope_factor = 8.0;
  s.rope_low_freq_factor = 1.0;
  s.rope_high_freq_factor = 4.0;
  s.rope_original_positions = 8192;
  const std::vector<double> scaled = rope_inverse_frequencies(s);
  ASSERT_EQ(scaled.size(), plain.size());
  int kept = 0, stretched = 0, blended = 0;
  double previous_ratio = 1.0;
  for (std::size_t i = 0; i < scaled.size(); ++i) {
    const double ratio = scaled[i] / plain[i];
    if (scaled[i] == plain[i]) {
      ++kept;
      EXPECT_LE(i, 28u);
    } else if (scaled[i] == plain[i] / 8.0) {
      ++stretched;
      EXPECT_GE(i, 35u);
    } else {
      ++blended;
      EXPECT_GT(ratio, 1.0 / 8.0) << i;
      EXPECT_LT(ratio, 1.0) << i;
      EXPECT_LT(ratio, previous_ratio) << i;  // longer wavelengths are stretched more
      // Llama 3.1's blend: (1 - w) / 8 + w, w = (8192 / wavelength - 1) / 3.
      const double w = (8192.0 * plain[i] / (2 * std::numbers::pi) - 1.0) / 3.0;
      EXPECT_NEAR(ratio, (1.0 - w) / 8.0 + w, 1e-12) << i;
    }
    previous_ratio = ratio;
  }
  EXPECT_EQ(kept, 29);
  EXPECT_EQ(stretched, 29);
  EXPECT_EQ(blended, 6);
}

TEST(LlamaKernels, RmsNormBackwardMatchesFiniteDifferences) {
  const int N = 3, C = 8;
  std::vector<double> x = waves(N * C, 0.3), w = waves(C, 1.1), g = waves(N * C, 2.0);
  std::vector<double> out(N * C), rstd(N);
  auto loss = [&] {
    kernels::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5);
    return dot(out, g);
  };
  loss();
  std::vector<double> dx(N * C, 0.0), dw(C, 0.0);
  kernels::rmsnorm_backward(dx.data(), dw.data(), g.data(), x.data(), w.data(), rstd.data(), N, C);
  EXPECT_LT(worst_gradient_error(x, dx, loss), 1e-8);
  EXPECT_LT(worst_gradient_error(w, dw, loss), 1e-8);
}

TEST(LlamaKernels, SwigluBackwardMatchesFiniteDifferences) {
  const int N = 3, F = 6;
  std::vector<double> x = waves(N * 2 * F, 0.5), g = waves(N * F, 1.7);
  for (double& v : x) v *= 3.0;  // both sides of the sigmoid
  std::vector<double> out(N * F);
  auto loss = [&] {
    kernels::swiglu_forward(out.data(), x.data(), N, F);
    return dot(out, g);
  };
  std::vector<double> dx(N * 2 * F);
  kernels::swiglu_backward(dx.data(), x.data(), g.data(), N, F);
  EXPECT_LT(worst_gradient_error(x, dx, loss), 1e-8);
}

// The float kernels (the fast exponential in SwiGLU, vectorised sums in RMSNorm) against the
// double ones on rows as wide as a real model's plus an odd tail, with both row sets: the
// AVX2/FMA one (where the CPU has it) and the baseline x86-64 one. Worst difference relative
// to the largest value of each output.
TEST(LlamaKernels, FloatRowsMatchDoubleOnWideRows) {
  const int N = 5, C = 771, F = 2051, T = 5, hs = 64, heads = 3, W = heads * hs + 4;
  auto to_float = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  auto worst = [](const std::vector<float>& got, const std::vector<double>& want) {
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
      scale = std::max(scale, std::abs(want[i]));
    }
    EXPECT_GT(scale, 0.1);
    return diff / scale;
  };
  // Inputs rounded to float first, so both precisions start from the same numbers.
  auto rounded = [&](std::vector<double> v) {
    for (double& x : v) x = static_cast<float>(x);
    return v;
  };
  const std::vector<double> x = rounded(waves(N * C, 0.3)), w = rounded(waves(C, 1.1)), g = rounded(waves(N * C, 2.0));
  std::vector<double> gu = waves(N * 2 * F, 0.5), dact = rounded(waves(N * F, 1.7));
  for (double& v : gu) v = static_cast<float>(v * 6.0);  // gates to +-13: both sides of the sigmoid, its tails
  const std::vector<double> qkv = rounded(waves(T * W, 0.2));
  const auto table_d = kernels::rope_table<double>(T, hs, 10000.0);
  const auto table_f = kernels::rope_table<float>(T, hs, 10000.0);

  std::vector<double> out_d(N * C), rstd_d(N), dx_d(N * C, 0.0), dw_d(C, 0.0), act_d(N * F), dgu_d(N * 2 * F);
  kernels::rmsnorm_forward(out_d.data(), rstd_d.data(), x.data(), w.data(), N, C, 1e-5);
  kernels::rmsnorm_backward(dx_d.data(), dw_d.data(), g.data(), x.data(), w.data(), rstd_d.data(), N, C);
  kernels::swiglu_forward(act_d.data(), gu.data(), N, F);
  kernels::swiglu_backward(dgu_d.data(), gu.data(), dact.data(), N, F);
  std::vector<double> rot_d = qkv, back_d = qkv;
  kernels::rope(rot_d.data(), table_d, 1, T, 0, W, heads, hs, false);
  kernels::rope(back_d.data(), table_d, 1, T, 0, W, heads, hs, true);

  for (const auto set : {kernels::FloatRowSet::widest, kernels::FloatRowSet::baseline}) {
    kernels::use_float_rows(set);
    const char* name = set == kernels::FloatRowSet::widest ? "widest" : "baseline";
    const std::vector<float> xf = to_float(x), wf = to_float(w), gf = to_float(g), guf = to_float(gu);
    const std::vector<float> dactf = to_float(dact);
    std::vector<float> out(N * C), rstd(N), dx(N * C, 0.0f), dw(C, 0.0f), act(N * F), dgu(N * 2 * F);
    kernels::rmsnorm_forward(out.data(), rstd.data(), xf.data(), wf.data(), N, C, 1e-5);
    kernels::rmsnorm_backward(dx.data(), dw.data(), gf.data(), xf.data(), wf.data(), rstd.data(), N, C);
    kernels::swiglu_forward(act.data(), guf.data(), N, F);
    kernels::swiglu_backward(dgu.data(), guf.data(), dactf.data(), N, F);
    std::vector<float> rot = to_float(qkv), back = to_float(qkv);
    kernels::rope(rot.data(), table_f, 1, T, 0, W, heads, hs, false);
    kernels::rope(back.data(), table_f, 1, T, 0, W, heads, hs, true);
    EXPECT_LT(worst(out, out_d), 1e-6) << name;
    EXPECT_LT(worst(rstd, rstd_d), 1e-6) << name;
    EXPECT_LT(worst(dx, dx_d), 1e-6) << name;
    EXPECT_LT(worst(dw, dw_d), 1e-6) << name;
    EXPECT_LT(worst(act, act_d), 1e-6) << name;
    EXPECT_LT(worst(dgu, dgu_d), 1e-6) << name;
    EXPECT_LT(worst(rot, rot_d), 1e-6) << name;
    EXPECT_LT(worst(back, back_d), 1e-6) << name;
  }
  kernels::use_float_rows(kernels::FloatRowSet::widest);
}

TEST(LlamaKernels, RopeBackwardIsTheTransposedRotation) {
  const int B = 2, T = 5, hs = 6, heads = 3, W = heads * hs + 4;  // 4 channels past the rotated heads
  const auto table = kernels::rope_table<double>(T + 3, hs, 500.0);
  std::vector<double> x = waves(B * T * W, 0.2), g = waves(B * T * W, 0.9);
  auto loss = [&] {
    std::vector<double> y = x;
    kernels::rope(y.data(), table, B, T, 3, W, heads, hs, false);
    return dot(y, g);
  };
  std::vector<double> dx = g;
  kernels::rope(dx.data(), table, B, T, 3, W, heads, hs, true);
  EXPECT_LT(worst_gradient_error(x, dx, loss), 1e-8);
  for (int row = 0; row < B * T; ++row)  // channels past the heads pass through
    for (int c = heads * hs; c < W; ++c) EXPECT_EQ(dx[row * W + c], g[row * W + c]);
}

// Grouped-query attention (4 query heads over 2 key/value heads): the gradient of q, k and v
// (folded over each group) against finite differences, with the probabilities kept and not.
TEST(LlamaKernels, GroupedQueryAttentionBackwardMatchesFiniteDifferences) {
  const int B = 2, T = 5, C = 8, NH = 4, NKV = 2, W = C + 2 * NKV * (C / NH);
  std::vector<double> qkv = waves(B * T * W, 0.4), g = waves(B * T * C, 1.3);
  for (double& v : qkv) v *= 2.0;
  std::vector<double> kept(static_cast<std::size_t>(B) * NH * T * T), work(T * T), dwork(T * T), out(B * T * C);
  AttentionProbs<double> keep{kept.data(), nullptr, dwork.data(), 1};
  AttentionProbs<double> recompute{nullptr, work.data(), dwork.data(), 1};
  for (const auto& probs : {keep, recompute}) {
    auto loss = [&] {
      kernels::attention_forward(out.data(), probs, qkv.data(), B, T, C, NH, NKV);
      return dot(out, g);
    };
    loss();
    std::vector<double> per_head(B * T * 3 * C), dqkv(B * T * W);
    kernels::attention_backward(per_head.data(), probs, g.data(), qkv.data(), B, T, C, NH, NKV);
    kernels::gqa_fold(dqkv.data(), per_head.data(), B * T, C, NH, NKV);
    EXPECT_LT(worst_gradient_error(qkv, dqkv, loss), 1e-8) << (probs.kept ? "kept" : "recomputed");
    // The layer-kernel seam's host backward (what the model calls, and the CUDA tests' reference)
    // folds the same way: the same bits.
    std::vector<double> seam(dqkv.size(), 1e30), scratch(grouped_gradient_elements(false, B * T, C, NH, NKV));
    AttentionProbs<double> with_scratch = probs;
    with_scratch.grouped_gradient = scratch.data();
    HostLayerKernels<double>().attention_backward(seam.data(), with_scratch, g.data(), qkv.data(), B, T, C, NH, NKV);
    EXPECT_EQ(seam, dqkv) << (probs.kept ? "kept" : "recomputed");
  }
}

TEST(LlamaRecompute, ActivationBytesFollowTheFormula) {
  const ModelShape shape = llama_shape(4, 32, 4, 2, 48, 16, 50, 64);
  const int B = 3;
  const std::size_t N = 3 * 16, C = 32, W = 32 + 2 * 2 * 8, F = 48, L = 4, NH = 4, TT = 16 * 16, Vp = 64;
  for (const int heads : {1, 2, 12}) {
    // x0, the final norm and its statistics, logits, losses, tmp, dres dtmp datty, dqkv, the
    // probabilities' gradient, two MLP-wide scratches; on the host, which folds grouped-query
    // gradients, also the per-query-head gradient (3 N C); a device sums the groups in place.
    for (const bool device : {false, true}) {
      const std::size_t shared = N * C + N * C + N + N * Vp + N + N * C + 3 * N * C + N * W + heads * TT + 4 * N * F +
                                 (device ? 0 : 3 * N * C);
      const std::size_t none = L * (5 * N * C + N * W + 3 * N * F + 2 * N + B * NH * TT) + shared;
      const std::size_t selective = L * (5 * N * C + N * W + 2 * N * F + 2 * N) + heads * TT + shared;
      const std::size_t full = L * N * C + (4 * N * C + N * W + 2 * N * F + 2 * N + heads * TT) + shared;
      EXPECT_EQ(activation_sizes(shape, B, Recompute::none, heads, device).total(), none) << device;
      EXPECT_EQ(activation_sizes(shape, B, Recompute::selective, heads, device).total(), selective) << device;
      EXPECT_EQ(activation_sizes(shape, B, Recompute::full, heads, device).total(), full) << device;
    }
  }
  // Multi-head attention has nothing to fold, on the host either.
  const ModelShape mha = llama_shape(4, 32, 4, 4, 48, 16, 50, 64);
  EXPECT_EQ(activation_sizes(mha, B, Recompute::none, 2, false).total(),
            activation_sizes(mha, B, Recompute::none, 2, true).total());
  for (const Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
    Llama<float> model(shape, B, host_exec(), r);
    const int heads = host_exec().layer_kernels().attention_heads_at_once(B, 4);
    EXPECT_EQ(model.activation_bytes(), activation_sizes(shape, B, r, heads, false).bytes(4, 4));
  }
}

// With flash attention (a GPU in bf16), as GPT-2's: a log-sum-exp per row and query head kept
// by each block (N NH), the row dots as backward scratch, no T x T blocks; the key/value heads
// change nothing (the kernels read them in place).
TEST(LlamaRecompute, FlashAttentionKeepsALogSumExpPerRowInstead) {
  const ModelShape shape = llama_shape(4, 128, 4, 2, 48, 16, 50, 64);  // head width 32
  const int B = 3;
  const std::size_t N = 3 * 16, C = 128, W = 128 + 2 * 2 * 32, F = 48, L = 4, NH = 4, Vp = 64;
  const std::size_t shared = N * C + N * C + N + N * Vp + N + N * C + 3 * N * C + N * W + N * NH + 4 * N * F;
  const std::size_t none = L * (5 * N * C + N * W + 3 * N * F + 2 * N + N * NH) + shared;
  const std::size_t selective = L * (5 * N * C + N * W + 2 * N * F + 2 * N + N * NH) + shared;
  const std::size_t full = L * N * C + (4 * N * C + N * W + 2 * N * F + 2 * N + N * NH) + shared;
  EXPECT_EQ(activation_sizes(shape, B, Recompute::none, 2, true, 1, false, true).total(), none);
  EXPECT_EQ(activation_sizes(shape, B, Recompute::selective, 2, true, 1, false, true).total(), selective);
  EXPECT_EQ(activation_sizes(shape, B, Recompute::full, 2, true, 1, false, true).total(), full);
  testing_support::FlashCarvingExec exec;
  for (const Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
    Llama<float> model(shape, B, exec, r);
    EXPECT_EQ(model.activation_bytes(), activation_sizes(shape, B, r, 2, true, 1, false, true).bytes(4, 4))
        << recompute_name(r);
  }
  // Head widths without a kernel keep the exact path's sizes (the host's, with the per-query-head
  // gradient to fold: the stand-in backend's memory is the host's).
  const ModelShape odd = llama_shape(4, 48, 4, 2, 48, 16, 50, 64);  // head width 12
  Llama<float> model(odd, B, exec);
  EXPECT_EQ(model.activation_bytes(),
            activation_sizes(odd, B, Recompute::none, exec.layer_kernels().attention_heads_at_once(B, 4), false).bytes(4, 4));
}

// MFU's count (llm.c's 6 N + 6 L C T) for SmolLM2-135M's shape at its 2048 positions: 1019.4
// MFLOP a token, against the planner's full-T x T count of 1231.6 (attention is 35% of that
// count at this length, and halved here).
TEST(LlamaModel, MfuFlopsPerTokenAreLlmcs) {
  const ModelShape s = llama_shape(30, 576, 9, 3, 1536, 2048, 49152, 49152);
  EXPECT_DOUBLE_EQ(mfu_flops_per_token(s, 2048), 6.0 * 134515008 + 6.0 * 30 * 576 * 2048);
  EXPECT_DOUBLE_EQ(mfu_flops_per_token(s, 2048), 1019426688.0);
  EXPECT_DOUBLE_EQ(train_flops_per_token(s, 2048), 1231552512.0);
}

TEST(LlamaModel, InitialLossIsNearLnVocab) {
  const ModelShape shape = llama_shape(2, 64, 4, 2, 128, 32, 256, 256);
  Llama<float> model(shape, 4);
  std::vector<float> params(model.layout().total());
  model.init_params(params, 3);
  const auto tokens = tokens_for(4, 32, 256, 1), targets = tokens_for(4, 32, 256, 2);
  const double loss = model.forward(params, tokens.data(), targets.data(), 4, 32);
  EXPECT_NEAR(loss, std::log(256.0), 0.05);
}

}  // namespace
}  // namespace st
