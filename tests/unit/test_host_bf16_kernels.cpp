// The layer kernels with bf16 storage on the host (exec/host_bf16_kernels.hpp), the GPU's
// reference in bf16. Each kernel computes in fp32 between bf16 operands and bf16 results, so each
// result is the exact result (the double-precision kernels on the same bf16 inputs) rounded once:
// within one bf16 unit in the last place of it plus fp32's own error, and equal to it rounded to
// nearest in almost every element (a kernel that stored an intermediate in bf16, or computed in
// it, misses both). Parameters' gradients stay fp32 and accumulate in fp32: a small gradient
// added to a large one is kept, where a bf16 sum would drop it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "exec/classifier_reference.hpp"
#include "exec/host_bf16_kernels.hpp"
#include "exec/host_kernels.hpp"
#include "exec/host_llama_kernels.hpp"
#include "random_values.hpp"

namespace st {
namespace {

using testing_support::random_values;

std::vector<Bf16> random_bf16(std::size_t n, unsigned seed, double scale = 1.0) {
  std::vector<Bf16> v(n);
  const std::vector<double> normal = random_values<double>(n, seed);
  for (std::size_t i = 0; i < n; ++i) v[i] = to_bf16(static_cast<float>(scale * normal[i]));
  return v;
}

std::vector<double> exact(const std::vector<Bf16>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_float(v[i]);
  return out;
}

double bf16_ulp(double x) { return std::ldexp(1.0, std::ilogb(std::max(std::abs(x), 1e-30)) - 7); }

// `got` is `want` (double precision, on the same bf16 inputs) rounded to bf16 once: each element
// within one bf16 unit in the last place plus fp32's error (fp32_error of the largest), and at
// least 99% of them exactly the nearest bf16.
void expect_rounded_once(const std::vector<Bf16>& got, const std::vector<double>& want, const std::string& what,
                         double fp32_error = 1e-6) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double largest = 0;
  for (double w : want) largest = std::max(largest, std::abs(w));
  std::size_t nearest = 0, outside = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = to_float(got[i]);
    if (got[i].bits == to_bf16(static_cast<float>(want[i])).bits) ++nearest;
    if (std::abs(g - want[i]) > bf16_ulp(want[i]) + fp32_error * largest) {
      if (++outside <= 3) ADD_FAILURE() << what << "[" << i << "] = " << g << ", exact " << want[i];
    }
  }
  EXPECT_EQ(outside, 0u) << what;
  EXPECT_GE(static_cast<double>(nearest), 0.99 * static_cast<double>(got.size()))
      << what << ": " << nearest << " of " << got.size() << " are the nearest bf16";
  EXPECT_GT(largest, 0.0) << what << ": nothing was computed";
}

constexpr int B = 2, T = 7, N = B * T, C = 64, NH = 4, OC = 96;

TEST(HostBf16Kernels, NormsRoundTheExactResultOnce) {
  HostBf16LayerKernels k;
  const auto in = random_bf16(N * C, 1, 2.0), w = random_bf16(C, 2), bias = random_bf16(C, 3, 0.1),
             dout = random_bf16(N * C, 4), din0 = random_bf16(N * C, 5);
  std::vector<Bf16> out(N * C), din = din0;
  std::vector<float> mean(N), rstd(N), dw(C), db(C);
  k.layernorm_forward(out.data(), mean.data(), rstd.data(), in.data(), w.data(), bias.data(), N, C);
  k.layernorm_backward(din.data(), dw.data(), db.data(), dout.data(), in.data(), w.data(), mean.data(), rstd.data(), N,
                       C);

  const auto x = exact(in), xw = exact(w), xb = exact(bias), xd = exact(dout);
  std::vector<double> ref(N * C), ref_mean(N), ref_rstd(N), ref_din = exact(din0), ref_dw(C), ref_db(C);
  kernels::layernorm_forward(ref.data(), ref_mean.data(), ref_rstd.data(), x.data(), xw.data(), xb.data(), N, C);
  kernels::layernorm_backward(ref_din.data(), ref_dw.data(), ref_db.data(), xd.data(), x.data(), xw.data(),
                              ref_mean.data(), ref_rstd.data(), N, C);
  expect_rounded_once(out, ref, "layernorm out");
  // din += ...: the stored gradient read, the sum rounded once.
  expect_rounded_once(din, ref_din, "layernorm din (added into)", 2e-6);
  for (int i = 0; i < N; ++i) EXPECT_NEAR(rstd[i], ref_rstd[i], 1e-6 * ref_rstd[i]) << "rstd stays fp32";
  for (int c = 0; c < C; ++c) {
    EXPECT_NEAR(dw[c], ref_dw[c], 1e-5 * (1 + std::abs(ref_dw[c]))) << "dweight stays fp32";
    EXPECT_NEAR(db[c], ref_db[c], 1e-5 * (1 + std::abs(ref_db[c]))) << "dbias stays fp32";
  }

  std::vector<Bf16> rms(N * C), rms_din = din0;
  std::vector<float> rms_rstd(N), rms_dw(C);
  k.rmsnorm_forward(rms.data(), rms_rstd.data(), in.data(), w.data(), N, C, 1e-5);
  k.rmsnorm_backward(rms_din.data(), rms_dw.data(), dout.data(), in.data(), w.data(), rms_rstd.data(), N, C);
  std::vector<double> ref_rms(N * C), ref_rms_rstd(N), ref_rms_din = exact(din0), ref_rms_dw(C);
  kernels::rmsnorm_forward(ref_rms.data(), ref_rms_rstd.data(), x.data(), xw.data(), N, C, 1e-5);
  kernels::rmsnorm_backward(ref_rms_din.data(), ref_rms_dw.data(), xd.data(), x.data(), xw.data(),
                            ref_rms_rstd.data(), N, C);
  expect_rounded_once(rms, ref_rms, "rmsnorm out");
  expect_rounded_once(rms_din, ref_rms_din, "rmsnorm din (added into)", 2e-6);

  // The fused residual add: the sum stored in bf16, the norm of what was stored.
  const auto a = random_bf16(N * C, 6);
  std::vector<Bf16> res(N * C), normed(N * C);
  k.residual_layernorm_forward(res.data(), normed.data(), mean.data(), rstd.data(), a.data(), in.data(), w.data(),
                               bias.data(), N, C);
  std::vector<double> ref_res(N * C);
  const auto xa = exact(a);
  for (std::size_t i = 0; i < ref_res.size(); ++i) ref_res[i] = xa[i] + x[i];
  expect_rounded_once(res, ref_res, "residual sum");
  const auto stored = exact(res);
  kernels::layernorm_forward(ref.data(), ref_mean.data(), ref_rstd.data(), stored.data(), xw.data(), xb.data(), N, C);
  expect_rounded_once(normed, ref, "layernorm of the stored sum");
}

TEST(HostBf16Kernels, LinearLayersRoundTheirProductsOnceAndKeepWeightGradientsInFp32) {
  HostBf16LayerKernels k;
  const auto in = random_bf16(N * C, 11), w = random_bf16(OC * C, 12, 0.05), bias = random_bf16(OC, 13, 0.1),
             dout = random_bf16(N * OC, 14), din0 = random_bf16(N * C, 15);
  std::vector<Bf16> out(N * OC), din = din0;
  k.linear_forward(out.data(), in.data(), w.data(), bias.data(), N, C, OC);
  const auto x = exact(in), xw = exact(w), xb = exact(bias), xd = exact(dout);
  std::vector<double> ref(N * OC);
  kernels::linear_forward(ref.data(), x.data(), xw.data(), xb.data(), N, C, OC);
  expect_rounded_once(out, ref, "linear out");

  // Weight gradients start large, and the two micro-batches' gradients added to them are small:
  // in fp32 they are kept (to 1e-5 relative), in a bf16 sum (a unit of 2^-7 near 1) they would not be.
  std::vector<float> dw(OC * C, 1.0f), db(OC, 1.0f);
  std::vector<double> ref_dw(OC * C, 0.0), ref_db(OC, 0.0), ref_din = exact(din0);
  for (int micro_batch = 0; micro_batch < 2; ++micro_batch) {
    k.linear_backward(din.data(), dw.data(), db.data(), dout.data(), in.data(), w.data(), N, C, OC, true);
    kernels::linear_backward(ref_din.data(), ref_dw.data(), ref_db.data(), xd.data(), x.data(), xw.data(), N, C, OC,
                             true);
    // din += ...: what was stored read back, the sum rounded once; the next adds to the stored.
    expect_rounded_once(din, ref_din, "linear din (added into)", 2e-6);
    ref_din = exact(din);
  }
  double largest = 0;
  for (double g : ref_dw) largest = std::max(largest, std::abs(g));
  ASSERT_GT(largest, 1e-3);
  for (std::size_t i = 0; i < dw.size(); ++i)
    ASSERT_NEAR(dw[i] - 1.0, ref_dw[i], 2e-6 * (1 + largest)) << "dweight[" << i << "]";
  for (int o = 0; o < OC; ++o) ASSERT_NEAR(db[o] - 1.0, ref_db[o], 2e-6 * (1 + largest)) << "dbias[" << o << "]";

  // Overwritten din, and GELU's pair: forward from the stored product, backward.
  std::vector<Bf16> din_new(N * C), pre(N * OC), act(N * OC), dpre(N * OC);
  std::vector<float> unused_dw(OC * C), unused_db(OC);
  k.linear_backward(din_new.data(), unused_dw.data(), unused_db.data(), dout.data(), in.data(), w.data(), N, C, OC,
                    false);
  std::vector<double> ref_din_new(N * C), scratch_dw(OC * C), scratch_db(OC);
  kernels::linear_backward(ref_din_new.data(), scratch_dw.data(), scratch_db.data(), xd.data(), x.data(), xw.data(), N,
                           C, OC, false);
  expect_rounded_once(din_new, ref_din_new, "linear din");
  k.linear_gelu_forward(act.data(), pre.data(), in.data(), w.data(), bias.data(), N, C, OC);
  expect_rounded_once(pre, ref, "linear_gelu pre");
  const auto stored_pre = exact(pre);
  std::vector<double> ref_act(N * OC), ref_dpre(N * OC);
  kernels::gelu_forward(ref_act.data(), stored_pre.data(), ref_act.size());
  expect_rounded_once(act, ref_act, "gelu of the stored product", 1e-6);
  k.gelu_backward(dpre.data(), pre.data(), dout.data(), dpre.size());
  kernels::gelu_backward(ref_dpre.data(), stored_pre.data(), xd.data(), ref_dpre.size());
  expect_rounded_once(dpre, ref_dpre, "gelu din");

  // Through a projection and the GELU before it in one call (the MLP's backward, composed): the
  // input's gradient stored (rounded) on the way, then the GELU's derivative of the stored product.
  const auto w2 = random_bf16(C * OC, 16, 0.05), dout2 = random_bf16(N * C, 17);
  std::vector<Bf16> dpre2(N * OC), scratch(N * OC);
  std::vector<float> dw2(C * OC), db2(C);
  k.linear_backward_gelu(dpre2.data(), scratch.data(), dw2.data(), db2.data(), dout2.data(), act.data(), pre.data(),
                         w2.data(), N, OC, C);
  std::vector<double> ref_scratch(N * OC), ref_dw2(C * OC), ref_db2(C), ref_dpre2(N * OC);
  const auto xw2 = exact(w2), xd2 = exact(dout2), stored_act = exact(act);
  kernels::linear_backward(ref_scratch.data(), ref_dw2.data(), ref_db2.data(), xd2.data(), stored_act.data(), xw2.data(),
                           N, OC, C, false);
  expect_rounded_once(scratch, ref_scratch, "linear_backward_gelu's input gradient on the way");
  const auto stored_scratch = exact(scratch);
  kernels::gelu_backward(ref_dpre2.data(), stored_pre.data(), stored_scratch.data(), ref_dpre2.size());
  expect_rounded_once(dpre2, ref_dpre2, "linear_backward_gelu's dpre");
  for (std::size_t i = 0; i < dw2.size(); ++i) ASSERT_NEAR(dw2[i], ref_dw2[i], 1e-5 * (1 + std::abs(ref_dw2[i])));
}

TEST(HostBf16Kernels, AttentionRoundsItsOutputAndGradientOnce) {
  // Multi-head and grouped-query attention (4 query heads over 2 key/value heads), kept and
  // recomputed probabilities (fp32 either way: they are statistics, not activations).
  for (const int NKV : {NH, 2}) {
    const int hs = C / NH, W = C + 2 * NKV * hs;
    const auto qkv = random_bf16(N * W, 21, 0.5), dout = random_bf16(N * C, 22);
    HostBf16LayerKernels k;
    const std::size_t block = std::size_t{T} * T;
    std::vector<float> kept(block * B * NH), dworking(block * B * NH), per_query_head(N * 3 * C);
    const AttentionProbs<float, Bf16> probs{kept.data(), nullptr, dworking.data(), B * NH, per_query_head.data()};
    std::vector<Bf16> out(N * C), dqkv(N * W);
    k.attention_forward(out.data(), probs, qkv.data(), B, T, C, NH, NKV);
    k.attention_backward(dqkv.data(), probs, dout.data(), qkv.data(), B, T, C, NH, NKV);

    const auto x = exact(qkv), xd = exact(dout);
    std::vector<double> ref_kept(kept.size()), ref_dworking(dworking.size()), ref(N * C), expanded(N * 3 * C),
        ref_dqkv(N * W);
    const AttentionProbs<double> ref_probs{ref_kept.data(), nullptr, ref_dworking.data(), B * NH};
    kernels::attention_forward(ref.data(), ref_probs, x.data(), B, T, C, NH, NKV);
    kernels::attention_backward(NKV == NH ? ref_dqkv.data() : expanded.data(), ref_probs, xd.data(), x.data(), B, T, C,
                                NH, NKV);
    if (NKV < NH) kernels::gqa_fold(ref_dqkv.data(), expanded.data(), N, C, NH, NKV);
    const std::string name = NKV == NH ? "multi-head" : "grouped-query";
    expect_rounded_once(out, ref, name + " attention out");
    expect_rounded_once(dqkv, ref_dqkv, name + " attention dqkv", 2e-6);

    // Decoding: the last three rows of the first sequence from its qkv rows.
    std::vector<Bf16> rows(3 * C);
    k.attention_rows(rows.data(), qkv.data(), T - 3, 3, C, NH, NKV);
    const std::vector<double> last(ref.begin() + (T - 3) * C, ref.begin() + T * C);
    expect_rounded_once(rows, last, name + " attention rows");
  }
}

TEST(HostBf16Kernels, LlamasGateAndRotationRoundOnce) {
  HostBf16LayerKernels k;
  const int F = 48, hs = 16, heads = 6, W = heads * hs;
  const auto in = random_bf16(N * 2 * F, 31), dout = random_bf16(N * F, 32);
  std::vector<Bf16> out(N * F), din(N * 2 * F);
  k.swiglu_forward(out.data(), in.data(), N, F);
  k.swiglu_backward(din.data(), in.data(), dout.data(), N, F);
  const auto x = exact(in), xd = exact(dout);
  std::vector<double> ref(N * F), ref_din(N * 2 * F);
  kernels::swiglu_forward(ref.data(), x.data(), N, F);
  kernels::swiglu_backward(ref_din.data(), x.data(), xd.data(), N, F);
  expect_rounded_once(out, ref, "swiglu out");
  expect_rounded_once(din, ref_din, "swiglu din");

  // Rotation of q's and k's heads by position, then back (the backward's transpose).
  const auto table = kernels::rope_table<float>(T + 3, hs, 10000.0);
  const auto ref_table = kernels::rope_table<double>(T + 3, hs, 10000.0);
  auto rows = random_bf16(N * W, 33);
  std::vector<double> ref_rows = exact(rows);
  k.rope(rows.data(), table.cos.data(), table.sin.data(), B, T, 3, W, heads, hs, false);
  kernels::rope(ref_rows.data(), ref_table, B, T, 3, W, heads, hs, false);
  expect_rounded_once(rows, ref_rows, "rope");
}

TEST(HostBf16Kernels, EmbeddingAndClassifier) {
  HostBf16LayerKernels k;
  const int vocab = 50, Vp = 56;
  const auto wte = random_bf16(Vp * C, 41, 0.1), wpe = random_bf16(T * C, 42, 0.1);
  std::vector<int> tokens(N);
  for (int i = 0; i < N; ++i) tokens[i] = (i * 13 + 5) % vocab;
  tokens[3] = -1;  // a row another tensor-parallel rank's slice holds: positions alone
  std::vector<Bf16> x0(N * C);
  k.encoder_forward(x0.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  const auto xwte = exact(wte), xwpe = exact(wpe);
  std::vector<double> ref(N * C);
  kernels::encoder_forward(ref.data(), tokens.data(), xwte.data(), xwpe.data(), B, T, C);
  expect_rounded_once(x0, ref, "encoder out");
  // Its backward adds fp32 gradients of the table's rows and of the positions.
  const auto dx = random_bf16(N * C, 43);
  std::vector<float> dwte(Vp * C), dwpe(T * C);
  k.encoder_backward(dwte.data(), dwpe.data(), dx.data(), tokens.data(), B, T, C);
  std::vector<double> ref_dwte(Vp * C), ref_dwpe(T * C);
  const auto xdx = exact(dx);
  kernels::encoder_backward(ref_dwte.data(), ref_dwpe.data(), xdx.data(), tokens.data(), B, T, C);
  for (std::size_t i = 0; i < dwte.size(); ++i) ASSERT_NEAR(dwte[i], ref_dwte[i], 1e-6) << "dwte " << i;
  for (std::size_t i = 0; i < dwpe.size(); ++i) ASSERT_NEAR(dwpe[i], ref_dwpe[i], 1e-6) << "dwpe " << i;

  // A vocabulary slice's statistics from bf16 logits (fp32), and its probabilities rounded once.
  const auto slice = random_bf16(N * Vp, 44, 2.0);
  std::vector<float> stats(3 * N), row_stats(2 * N), losses_slice(N);
  k.logit_slice_stats(slice.data(), tokens.data(), stats.data(), N, vocab, Vp, 0);
  const auto xslice = exact(slice);
  std::vector<double> ref_stats(3 * N), ref_row_stats(2 * N), ref_losses(N), ref_probs = xslice;
  kernels::logit_slice_stats(xslice.data(), tokens.data(), ref_stats.data(), N, vocab, Vp, 0);
  for (std::size_t i = 0; i < stats.size(); ++i) ASSERT_NEAR(stats[i], ref_stats[i], 1e-5 * (1 + std::abs(ref_stats[i])));
  k.logit_slices_combine(stats.data(), row_stats.data(), losses_slice.data(), nullptr, N, 1, {});
  kernels::logit_slices_combine(ref_stats.data(), ref_row_stats.data(), ref_losses.data(), nullptr, N, 1);
  std::vector<Bf16> probs = slice;
  k.logit_slice_softmax(probs.data(), row_stats.data(), N, vocab, Vp);
  kernels::logit_slice_softmax(ref_probs.data(), ref_row_stats.data(), N, vocab, Vp);
  expect_rounded_once(probs, ref_probs, "slice probabilities", 2e-6);

  // The fused classifier on bf16 storage: its logits and the head's backward are the fp32
  // reference's on the widened operands (the head's input gradient rounded once more, to bf16).
  std::vector<Bf16> logits(N * Vp), ref_logits(N * Vp);
  k.classifier_logits(logits.data(), x0.data(), wte.data(), N, C, Vp);
  const auto xin = exact(x0);
  std::vector<float> fin(xin.begin(), xin.end()), fw(xwte.begin(), xwte.end());
  kernels::classifier_logits(ref_logits.data(), fin.data(), fw.data(), N, C, Vp);
  for (std::size_t i = 0; i < logits.size(); ++i) ASSERT_EQ(logits[i].bits, ref_logits[i].bits) << "logit " << i;

  std::vector<float> losses(N);
  std::vector<int> targets(N);
  for (int i = 0; i < N; ++i) targets[i] = (i * 7 + 1) % vocab;
  double total = 0;
  k.classifier_cross_entropy(logits.data(), losses.data(), targets.data(), N, vocab, Vp, {&total, double(N)});
  EXPECT_GT(total, 0.0);
  std::vector<Bf16> din(N * C);
  std::vector<float> dw(Vp * C), ref_dw(Vp * C), ref_din(N * C);
  k.classifier_backward(din.data(), dw.data(), logits.data(), x0.data(), wte.data(), N, C, Vp, 1.0f / N);
  kernels::classifier_backward(ref_din.data(), ref_dw.data(), logits.data(), fin.data(), fw.data(), N, C, Vp,
                               1.0f / N);
  for (std::size_t i = 0; i < dw.size(); ++i) ASSERT_EQ(dw[i], ref_dw[i]) << "dweight " << i;
  for (std::size_t i = 0; i < din.size(); ++i) ASSERT_EQ(din[i].bits, to_bf16(ref_din[i]).bits) << "din " << i;
}

}  // namespace
}  // namespace st
