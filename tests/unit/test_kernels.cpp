// Every layer's backward against central finite differences, in double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "exec/host_kernels.hpp"

namespace st {
namespace {

using Vec = std::vector<double>;

Vec random_vector(std::size_t n, unsigned seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  Vec v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks analytic[i] == d/dx[i] <weights, f(x)> for every element of x.
void expect_matches_finite_differences(Vec& x, const std::function<Vec()>& f, const Vec& weights, const Vec& analytic,
                                       const char* what, double tolerance = 1e-6) {
  ASSERT_EQ(x.size(), analytic.size());
  const double h = 1e-5;
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = dot(weights, f());
    x[i] = keep - h;
    const double down = dot(weights, f());
    x[i] = keep;
    const double numeric = (up - down) / (2 * h);
    const double error = std::abs(numeric - analytic[i]) / std::max(1.0, std::abs(numeric));
    worst = std::max(worst, error);
    EXPECT_LT(error, tolerance) << what << "[" << i << "]: analytic " << analytic[i] << " numeric " << numeric;
  }
  EXPECT_GT(dot(analytic, analytic), 0.0) << what << ": the gradient is identically zero";
}

TEST(KernelGradients, LayerNorm) {
  const int N = 3, C = 7;
  Vec in = random_vector(N * C, 1), w = random_vector(C, 2), b = random_vector(C, 3);
  Vec dout = random_vector(N * C, 4);
  Vec out(N * C), mean(N), rstd(N);
  auto f = [&] {
    kernels::layernorm_forward(out.data(), mean.data(), rstd.data(), in.data(), w.data(), b.data(), N, C);
    return out;
  };
  f();
  Vec din(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  kernels::layernorm_backward(din.data(), dw.data(), db.data(), dout.data(), in.data(), w.data(), mean.data(),
                              rstd.data(), N, C);
  expect_matches_finite_differences(in, f, dout, din, "layernorm din");
  expect_matches_finite_differences(w, f, dout, dw, "layernorm dweight");
  expect_matches_finite_differences(b, f, dout, db, "layernorm dbias");
}

TEST(KernelGradients, LayerNormNormalises) {
  const int N = 2, C = 64;
  Vec in = random_vector(N * C, 9, 3.0), w(C, 1.0), b(C, 0.0), out(N * C), mean(N), rstd(N);
  kernels::layernorm_forward(out.data(), mean.data(), rstd.data(), in.data(), w.data(), b.data(), N, C);
  for (int i = 0; i < N; ++i) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += out[i * C + c] / C;
    for (int c = 0; c < C; ++c) v += (out[i * C + c] - m) * (out[i * C + c] - m) / C;
    EXPECT_NEAR(m, 0.0, 1e-12);
    EXPECT_NEAR(v, 1.0, 1e-4);  // eps = 1e-5 against a variance of about 9
  }
}

TEST(KernelGradients, Linear) {
  const int N = 4, C = 5, OC = 6;
  Vec in = random_vector(N * C, 5), w = random_vector(OC * C, 6), b = random_vector(OC, 7);
  Vec dout = random_vector(N * OC, 8), out(N * OC);
  auto f = [&] {
    kernels::linear_forward(out.data(), in.data(), w.data(), b.data(), N, C, OC);
    return out;
  };
  f();
  Vec din(N * C, 0.0), dw(OC * C, 0.0), db(OC, 0.0);
  kernels::linear_backward(din.data(), dw.data(), db.data(), dout.data(), in.data(), w.data(), N, C, OC, false);
  expect_matches_finite_differences(in, f, dout, din, "linear din");
  expect_matches_finite_differences(w, f, dout, dw, "linear dweight");
  expect_matches_finite_differences(b, f, dout, db, "linear dbias");
  // Parameter gradients accumulate: a second backward doubles them.
  Vec dw_twice = dw;
  kernels::linear_backward(din.data(), dw_twice.data(), db.data(), dout.data(), in.data(), w.data(), N, C, OC, false);
  for (std::size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw_twice[i], 2 * dw[i], 1e-12);
}

// Probabilities kept for backward (B*NH blocks), or not kept: `heads` working blocks in flight.
struct AttentionBuffers {
  Vec kept, working, dworking;
  AttentionProbs<double> probs;
  AttentionBuffers(int B, int T, int NH, bool keep, int heads) {
    const std::size_t block = static_cast<std::size_t>(T) * T;
    if (keep) kept.resize(block * B * NH);
    else working.resize(block * heads);
    dworking.resize(block * heads);
    probs = {keep ? kept.data() : nullptr, keep ? nullptr : working.data(), dworking.data(), heads};
  }
};

struct AttentionShape {
  int B, T, C, NH;
};

TEST(KernelGradients, CausalAttention) {
  // Short sequences, and long ones whose matmuls run in bands of query rows (the last band short).
  for (const auto [B, T, C, NH] : {AttentionShape{2, 5, 8, 2}, AttentionShape{1, 260, 4, 2}}) {
    for (const bool keep : {true, false}) {
      Vec qkv = random_vector(B * T * 3 * C, 11), dout = random_vector(B * T * C, 12);
      Vec out(B * T * C);
      AttentionBuffers buffers(B, T, NH, keep, 2);
      auto f = [&] {
        kernels::attention_forward(out.data(), buffers.probs, qkv.data(), B, T, C, NH, NH);
        return out;
      };
      f();
      Vec dqkv(qkv.size(), 1e3);  // overwritten: start from garbage
      kernels::attention_backward(dqkv.data(), buffers.probs, dout.data(), qkv.data(), B, T, C, NH, NH);
      expect_matches_finite_differences(qkv, f, dout, dqkv, keep ? "attention dqkv" : "attention dqkv, recomputed");
      // The probabilities are a causal softmax: rows sum to 1, zero above the diagonal.
      for (int t = 0; keep && t < T; ++t) {
        double sum = 0;
        for (int j = 0; j < T; ++j) {
          const double p = buffers.kept[static_cast<std::size_t>(t) * T + j];
          if (j > t) {
            ASSERT_EQ(p, 0.0) << "t " << t << " j " << j;
          }
          sum += p;
        }
        EXPECT_NEAR(sum, 1.0, 1e-12) << "row " << t;
      }
    }
  }
}

TEST(KernelGradients, RecomputedAttentionEqualsKeptBitForBit) {
  // The probabilities recomputed in backward come from the same code as the forward's: the
  // output and every gradient are the same to the bit, whatever the heads in flight.
  const int B = 3, T = 140, C = 12, NH = 3;  // two bands of query rows
  const std::vector<float> qkv = [&] {
    const Vec d = random_vector(B * T * 3 * C, 21);
    return std::vector<float>(d.begin(), d.end());
  }();
  const std::vector<float> dout = [&] {
    const Vec d = random_vector(B * T * C, 22);
    return std::vector<float>(d.begin(), d.end());
  }();
  auto run = [&](bool keep, int heads) {
    const std::size_t block = static_cast<std::size_t>(T) * T;
    std::vector<float> kept(keep ? block * B * NH : 0), working(keep ? 0 : block * heads), dworking(block * heads);
    const AttentionProbs<float> probs{keep ? kept.data() : nullptr, keep ? nullptr : working.data(), dworking.data(),
                                      heads};
    std::vector<float> out(static_cast<std::size_t>(B) * T * C), dqkv(qkv.size());
    kernels::attention_forward(out.data(), probs, qkv.data(), B, T, C, NH, NH);
    kernels::attention_backward(dqkv.data(), probs, dout.data(), qkv.data(), B, T, C, NH, NH);
    out.insert(out.end(), dqkv.begin(), dqkv.end());
    return out;
  };
  const std::vector<float> reference = run(true, 1);
  for (const int heads : {1, 2, B * NH}) {
    EXPECT_EQ(run(false, heads), reference) << heads << " heads in flight";
    EXPECT_EQ(run(true, heads), reference) << heads << " heads in flight, kept";
  }
}

TEST(KernelGradients, AttentionIsCausal) {
  // Changing a later token's q, k or v must not change an earlier position's output.
  const int B = 1, T = 6, C = 4, NH = 2;
  Vec qkv = random_vector(T * 3 * C, 13), out(T * C);
  AttentionBuffers buffers(B, T, NH, true, 1);
  kernels::attention_forward(out.data(), buffers.probs, qkv.data(), B, T, C, NH, NH);
  const Vec before = out;
  for (int c = 0; c < 3 * C; ++c) qkv[(T - 1) * 3 * C + c] += 1.0;
  kernels::attention_forward(out.data(), buffers.probs, qkv.data(), B, T, C, NH, NH);
  for (int i = 0; i < (T - 1) * C; ++i) EXPECT_EQ(out[i], before[i]);
  bool last_changed = false;
  for (int c = 0; c < C; ++c) last_changed |= out[(T - 1) * C + c] != before[(T - 1) * C + c];
  EXPECT_TRUE(last_changed);
}

TEST(KernelAttentionRows, EqualsTheCausalForwardFromAnyFirstPosition) {
  // Decoding's attention over a cache: rows first.. of one sequence equal those rows of the full
  // causal attention, in double (the same exponential) to rounding, whatever the split.
  const int T = 150, C = 12, NH = 3;  // past one band of query rows
  const Vec qkv = random_vector(T * 3 * C, 31);
  Vec reference(static_cast<std::size_t>(T) * C);
  AttentionBuffers buffers(1, T, NH, true, 1);
  kernels::attention_forward(reference.data(), buffers.probs, qkv.data(), 1, T, C, NH, NH);
  for (const int first : {0, 1, 37, 128, T - 1}) {
    const int n = T - first;
    Vec out(static_cast<std::size_t>(n) * C);
    kernels::attention_rows(out.data(), qkv.data(), first, n, C, NH, NH);
    double worst = 0;
    for (std::size_t i = 0; i < out.size(); ++i)
      worst = std::max(worst, std::fabs(out[i] - reference[static_cast<std::size_t>(first) * C + i]));
    EXPECT_LT(worst, 1e-12) << "first " << first;
  }
  // Rows that see only the cache before them: the last row's output does not depend on the
  // rows after it, which the call never reads (a shorter buffer would do).
  Vec one(C);
  kernels::attention_rows(one.data(), qkv.data(), 9, 1, C, NH, NH);
  for (int c = 0; c < C; ++c) EXPECT_NEAR(one[c], reference[9 * C + c], 1e-12);
}

TEST(KernelAccuracy, SoftmaxExpIsWithinThreeTenthsOfAMillionthRelative) {
  // Every float in [-87, 0] one step of 2^-12 apart, and the ends.
  double worst = 0;
  for (double x = -87.0; x <= 0.0; x += 1.0 / 4096) {
    const float xf = static_cast<float>(x);
    const double exact = std::exp(static_cast<double>(xf));
    worst = std::max(worst, std::abs(static_cast<double>(kernels::exp_float(xf)) - exact) / exact);
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(kernels::exp_float(0.0f), 1.0f);
  // Below e^-87 it stays at the smallest normals (softmax only adds them to at least 1).
  EXPECT_GT(kernels::exp_float(-1000.0f), 0.0f);
  EXPECT_LT(kernels::exp_float(-1000.0f), 2e-38f);
  EXPECT_TRUE(std::isnan(kernels::exp_float(std::nanf(""))));
}

TEST(KernelGradients, Gelu) {
  const std::size_t n = 40;
  Vec in = random_vector(n, 14, 2.0), dout = random_vector(n, 15), out(n);
  auto f = [&] {
    kernels::gelu_forward(out.data(), in.data(), n);
    return out;
  };
  f();
  Vec din(n);
  kernels::gelu_backward(din.data(), in.data(), dout.data(), n);
  expect_matches_finite_differences(in, f, dout, din, "gelu din");
  // GPT-2's tanh approximation at known points.
  Vec x = {1.0, -1.0, 3.0}, y(3);
  kernels::gelu_forward(y.data(), x.data(), 3);
  EXPECT_NEAR(y[0], 0.8411919906082768, 1e-12);
  EXPECT_NEAR(y[1], -0.15880800939172324, 1e-12);
  EXPECT_NEAR(y[2], 2.996362607918227, 1e-12);
}

TEST(Kernels, FloatTanhIsAccurateEverywhere) {
  double worst = 0;
  for (double x = -20.0; x <= 20.0; x += 1e-3) {
    const float xf = static_cast<float>(x);
    worst = std::max(worst, std::abs(static_cast<double>(kernels::tanh_float(xf)) - std::tanh(static_cast<double>(xf))));
  }
  EXPECT_LT(worst, 1e-6);
  EXPECT_EQ(kernels::tanh_float(0.0f), 0.0f);
  EXPECT_EQ(kernels::tanh_float(-3.0f), -kernels::tanh_float(3.0f));
}

TEST(KernelGradients, SoftmaxCrossEntropyWithPaddedVocabulary) {
  const int N = 4, V = 5, Vp = 8;
  Vec logits = random_vector(N * Vp, 16);
  const std::vector<int> targets = {0, 4, 2, 2};
  Vec probs(N * Vp), losses(N);
  auto loss_of = [&] {
    probs = logits;
    return Vec{kernels::softmax_cross_entropy_forward(probs.data(), losses.data(), targets.data(), N, V, Vp) / N};
  };
  loss_of();
  Vec dlogits = probs;
  kernels::softmax_cross_entropy_backward(dlogits.data(), targets.data(), N, V, Vp, 1.0 / N);
  expect_matches_finite_differences(logits, loss_of, Vec{1.0}, dlogits, "cross-entropy dlogits");
  for (int i = 0; i < N; ++i)
    for (int j = V; j < Vp; ++j) EXPECT_EQ(dlogits[i * Vp + j], 0.0) << "padded logits must get no gradient";
  // Uniform logits give ln(V).
  Vec flat(Vp, 0.0), one_loss(1);
  const int target = 1;
  EXPECT_NEAR(kernels::softmax_cross_entropy_forward(flat.data(), one_loss.data(), &target, 1, V, Vp), std::log(5.0),
              1e-12);
}

TEST(KernelGradients, Encoder) {
  const int B = 2, T = 3, C = 4, V = 5;
  const std::vector<int> tokens = {1, 1, 4, 0, 1, 3};  // repeats: gradients must add up
  Vec wte = random_vector(V * C, 17), wpe = random_vector(T * C, 18), dout = random_vector(B * T * C, 19);
  Vec out(B * T * C);
  auto f = [&] {
    kernels::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return out;
  };
  f();
  Vec dwte(V * C, 0.0), dwpe(T * C, 0.0);
  kernels::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  expect_matches_finite_differences(wte, f, dout, dwte, "encoder dwte");
  expect_matches_finite_differences(wpe, f, dout, dwpe, "encoder dwpe");
}

}  // namespace
}  // namespace st
