// The host reference of flash attention (exec/flash_reference.hpp), which the CUDA kernels are
// tested against: it must compute today's attention (the host kernels the CPU trains with) and
// its exact gradient. Multi-head, grouped-query and multi-query shapes; a single position, and
// lengths on both sides of the device kernels' 64-row tiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "exec/flash_reference.hpp"
#include "exec/layer_kernels.hpp"
#include "random_values.hpp"

namespace st {
namespace {

struct Shape {
  int B, T, C, NH, NKV;
  int hs() const { return C / NH; }
  int W() const { return C + 2 * NKV * hs(); }
  std::string name() const {
    return "B " + std::to_string(B) + " T " + std::to_string(T) + " C " + std::to_string(C) + " NH " +
           std::to_string(NH) + " NKV " + std::to_string(NKV);
  }
};

using testing_support::random_values;

// max |got - want| / max |want|.
template <class R>
double norm_relative_error(const std::vector<R>& got, const std::vector<R>& want) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff / std::max(scale, 1e-30);
}

// Today's host attention (what CPU training runs): output, kept probabilities and the gradient
// folded over each group (HostLayerKernels folds what the host kernel leaves per query head).
template <class R>
struct HostAttention {
  std::vector<R> out, probs, dqkv;
};
template <class R>
HostAttention<R> host_attention(const Shape& s, const std::vector<R>& qkv, const std::vector<R>& dout) {
  const std::size_t block = static_cast<std::size_t>(s.T) * s.T;
  HostAttention<R> r{std::vector<R>(static_cast<std::size_t>(s.B) * s.T * s.C),
                     std::vector<R>(block * s.B * s.NH), std::vector<R>(qkv.size())};
  std::vector<R> dworking(block * s.B * s.NH), per_query_head(static_cast<std::size_t>(3) * s.B * s.T * s.C);
  const AttentionProbs<R> probs{r.probs.data(), nullptr, dworking.data(), s.B * s.NH, per_query_head.data()};
  HostLayerKernels<R> host;
  host.attention_forward(r.out.data(), probs, qkv.data(), s.B, s.T, s.C, s.NH, s.NKV);
  host.attention_backward(r.dqkv.data(), probs, dout.data(), qkv.data(), s.B, s.T, s.C, s.NH, s.NKV);
  return r;
}

template <class R>
void check_against_host_attention(const Shape& s) {
  const auto qkv = random_values<R>(static_cast<std::size_t>(s.B) * s.T * s.W(), 31);
  const auto dout = random_values<R>(static_cast<std::size_t>(s.B) * s.T * s.C, 32);
  const HostAttention<R> want = host_attention(s, qkv, dout);
  // Garbage first: every element must be written.
  std::vector<R> out(want.out.size(), R(1e30)), lse(static_cast<std::size_t>(s.B) * s.NH * s.T, R(1e30)),
      dqkv(qkv.size(), R(1e30));
  kernels::flash_attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH, s.NKV);
  kernels::flash_attention_backward(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH,
                                    s.NKV);
  EXPECT_LE(norm_relative_error(out, want.out), 1e-6) << s.name() << ": output";
  EXPECT_LE(norm_relative_error(dqkv, want.dqkv), 1e-6) << s.name() << ": gradient";
  // lse is the log of each row's softmax denominator: e^(s_tj - lse_t) are the kept probabilities.
  const int hs = s.hs(), W = s.W(), G = s.NH / s.NKV;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  double worst = 0;
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = 0; t < s.T; ++t)
        for (int j = 0; j <= t; ++j) {
          const R* q = qkv.data() + (static_cast<std::size_t>(b) * s.T + t) * W + h * hs;
          const R* k = qkv.data() + (static_cast<std::size_t>(b) * s.T + j) * W + s.C + (h / G) * hs;
          double score = 0;
          for (int d = 0; d < hs; ++d) score += static_cast<double>(q[d]) * static_cast<double>(k[d]);
          const double p = std::exp(scale * score - static_cast<double>(lse[(static_cast<std::size_t>(b) * s.NH + h) * s.T + t]));
          const double kept = want.probs[((static_cast<std::size_t>(b) * s.NH + h) * s.T + t) * s.T + j];
          worst = std::max(worst, std::abs(p - kept));
        }
  EXPECT_LE(worst, 1e-6) << s.name() << ": probabilities from lse against the kept ones";
}

// Multi-head (GPT-2), grouped-query and multi-query; T = 1, and 63, 64, 65 and 130 around the
// device kernels' 64-row tiles (the host's own bands are 128 rows).
const std::vector<Shape> kShapes = {
    {2, 1, 16, 2, 2}, {1, 63, 16, 2, 2}, {2, 64, 32, 4, 2}, {1, 65, 32, 4, 1}, {1, 130, 24, 3, 3}, {2, 130, 32, 4, 1},
};

TEST(FlashReference, EqualsTheHostAttentionInDouble) {
  for (const Shape& s : kShapes) check_against_host_attention<double>(s);
}

// In float the host attention uses its vectorised exponential (3e-7 relative) and BLAS's sums:
// still within 1e-6 of the reference's.
TEST(FlashReference, EqualsTheHostAttentionInFloat) {
  for (const Shape& s : kShapes) check_against_host_attention<float>(s);
}

// The backward is the forward's exact gradient: every element of qkv against central
// differences of <dout, out(qkv)>, in double.
TEST(FlashReference, GradientMatchesFiniteDifferences) {
  for (const Shape& s : {Shape{2, 5, 8, 2, 2}, Shape{1, 6, 8, 4, 2}, Shape{1, 7, 12, 4, 1}}) {
    auto qkv = random_values<double>(static_cast<std::size_t>(s.B) * s.T * s.W(), 41);
    const auto dout = random_values<double>(static_cast<std::size_t>(s.B) * s.T * s.C, 42);
    std::vector<double> out(dout.size()), lse(static_cast<std::size_t>(s.B) * s.NH * s.T), dqkv(qkv.size(), 1e30);
    auto loss = [&] {
      kernels::flash_attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH, s.NKV);
      double sum = 0;
      for (std::size_t i = 0; i < out.size(); ++i) sum += dout[i] * out[i];
      return sum;
    };
    loss();
    kernels::flash_attention_backward(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), s.B, s.T, s.C,
                                      s.NH, s.NKV);
    const double h = 1e-5;
    double worst = 0, norm = 0;
    for (std::size_t i = 0; i < qkv.size(); ++i) {
      const double keep = qkv[i];
      qkv[i] = keep + h;
      const double up = loss();
      qkv[i] = keep - h;
      const double down = loss();
      qkv[i] = keep;
      const double numeric = (up - down) / (2 * h);
      worst = std::max(worst, std::abs(numeric - dqkv[i]) / std::max(1.0, std::abs(numeric)));
      norm += dqkv[i] * dqkv[i];
    }
    EXPECT_LT(worst, 1e-6) << s.name();
    EXPECT_GT(norm, 0.0) << s.name() << ": the gradient is identically zero";
  }
}

// Row t depends on positions 0..t only: changing the last position's q, k and v changes the last
// row's output and lse and nothing before it.
TEST(FlashReference, IsCausal) {
  const Shape s{1, 9, 8, 2, 1};
  auto qkv = random_values<double>(static_cast<std::size_t>(s.T) * s.W(), 43);
  std::vector<double> out(static_cast<std::size_t>(s.T) * s.C), lse(static_cast<std::size_t>(s.NH) * s.T);
  kernels::flash_attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH, s.NKV);
  const auto out_before = out, lse_before = lse;
  for (int c = 0; c < s.W(); ++c) qkv[static_cast<std::size_t>(s.T - 1) * s.W() + c] += 1.0;
  kernels::flash_attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH, s.NKV);
  for (int i = 0; i < (s.T - 1) * s.C; ++i) EXPECT_EQ(out[i], out_before[i]) << i;
  for (int h = 0; h < s.NH; ++h) {
    for (int t = 0; t + 1 < s.T; ++t) EXPECT_EQ(lse[h * s.T + t], lse_before[h * s.T + t]);
    EXPECT_NE(lse[h * s.T + s.T - 1], lse_before[h * s.T + s.T - 1]);
  }
}

}  // namespace
}  // namespace st
