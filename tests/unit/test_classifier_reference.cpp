// The fused classifier's host reference (exec/classifier_reference.hpp), which the CUDA kernels
// are tested against and which the host runs where a backend claims the fused path: on the same
// bf16 logits it must equal the unfused host kernels the CPU trains with (the loss, and
// softmax - onehot rounded to bf16 once), whole and split over vocabulary slices (a slice of
// padding only among them), with or without targets; and the head's product and backward from
// bf16 d(loss)/d(logits) must be the unfused composition's within the one rounding of dlogits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "exec/classifier_reference.hpp"
#include "exec/host_kernels.hpp"
#include "random_values.hpp"

namespace st {
namespace {

// Logits as a model's head writes them: bf16, a few large ones among many small.
std::vector<Bf16> random_logits(std::size_t n, unsigned seed, double scale = 3.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<Bf16> v(n);
  for (auto& x : v) x = to_bf16(static_cast<float>(normal(rng)));
  return v;
}

template <class R>
std::vector<R> widened(const std::vector<Bf16>& v) {
  std::vector<R> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<R>(to_float(v[i]));
  return out;
}

using testing_support::random_values;

std::vector<int> targets_for(int N, int V) {
  std::vector<int> t(static_cast<std::size_t>(N));
  for (int i = 0; i < N; ++i) t[static_cast<std::size_t>(i)] = (i * 7 + 3) % V;
  t.front() = 0;  // the first and the last real column
  t.back() = V - 1;
  return t;
}

// A bf16 value's spacing at x (one unit in the last place of bf16).
double bf16_ulp(double x) {
  const double a = std::max(std::abs(x), 1e-30);
  return std::ldexp(1.0, std::ilogb(a) - 7);
}

constexpr int N = 9, V = 33, Vp = 40;

// Whole rows, with targets: the fused pass equals softmax_cross_entropy_forward and _backward
// (scale 1) on the same logits. The probabilities are the same expression in both, so
// d(loss)/d(logits) is theirs rounded once, bit for bit; the loss is log-sum-exp minus the
// target's logit against -log p(target): equal to rounding.
template <class R>
void check_cross_entropy(double loss_bound) {
  const std::vector<Bf16> logits = random_logits(static_cast<std::size_t>(N) * Vp, 5);
  const std::vector<int> targets = targets_for(N, V);
  std::vector<R> unfused = widened<R>(logits), want_losses(N);
  const double want = kernels::softmax_cross_entropy_forward(unfused.data(), want_losses.data(), targets.data(), N, V, Vp);
  kernels::softmax_cross_entropy_backward(unfused.data(), targets.data(), N, V, Vp, R(1));

  std::vector<Bf16> fused = logits;
  std::vector<R> losses(N);
  const double got = kernels::classifier_cross_entropy(fused.data(), losses.data(), targets.data(), N, V, Vp);
  EXPECT_NEAR(got, want, loss_bound * std::abs(want));
  for (int i = 0; i < N; ++i) EXPECT_NEAR(losses[i], want_losses[i], loss_bound * std::abs(want_losses[i])) << "row " << i;
  for (std::size_t i = 0; i < fused.size(); ++i) {
    EXPECT_EQ(fused[i].bits, to_bf16(static_cast<float>(unfused[i])).bits)
        << "element " << i << ": " << to_float(fused[i]) << " against " << unfused[i];
    if (static_cast<int>(i % Vp) >= V) {
      EXPECT_EQ(fused[i].bits, 0) << "padded column " << i % Vp;
    }
  }
}

TEST(ClassifierReference, CrossEntropyEqualsTheUnfusedKernelsInDouble) { check_cross_entropy<double>(1e-13); }
TEST(ClassifierReference, CrossEntropyEqualsTheUnfusedKernelsInFloat) { check_cross_entropy<float>(1e-6); }

// Without targets the rows become the unfused softmax's probabilities, rounded once.
TEST(ClassifierReference, SoftmaxEqualsTheUnfusedKernel) {
  const std::vector<Bf16> logits = random_logits(static_cast<std::size_t>(N) * Vp, 6);
  std::vector<double> unfused = widened<double>(logits), losses(N);
  kernels::softmax_cross_entropy_forward(unfused.data(), losses.data(), static_cast<const int*>(nullptr), N, V, Vp);
  std::vector<Bf16> fused = logits;
  kernels::classifier_softmax<double>(fused.data(), N, V, Vp);
  for (std::size_t i = 0; i < fused.size(); ++i)
    EXPECT_EQ(fused[i].bits, to_bf16(static_cast<float>(unfused[i])).bits) << "element " << i;
}

// A vocabulary of 33 real tokens padded to 40, split into `degree` slices of 40 / degree columns
// (with 4 slices of 10 the last holds 3 real tokens; with 8 of 5 the last holds padding only):
// each slice's statistics, combined by the unfused combine, then each slice's d(loss)/d(logits)
// in place, put back together, equal the whole row's within one bf16 unit (the two sum the
// exponentials in another order), and the losses the whole row's; the statistics equal the
// unfused kernel's on the widened logits bit for bit. Without targets likewise the probabilities.
TEST(ClassifierReference, VocabularySlicesEqualTheWholeRow) {
  const std::vector<Bf16> logits = random_logits(static_cast<std::size_t>(N) * Vp, 7);
  const std::vector<int> targets = targets_for(N, V);
  for (const bool with_targets : {true, false}) {
    std::vector<Bf16> whole = logits;
    std::vector<double> whole_losses(N);
    const double want = with_targets
                            ? kernels::classifier_cross_entropy(whole.data(), whole_losses.data(), targets.data(), N, V, Vp)
                            : 0.0;
    if (!with_targets) kernels::classifier_softmax<double>(whole.data(), N, V, Vp);
    for (const int degree : {1, 2, 4, 8}) {
      const int slice = Vp / degree;
      const std::string what = std::to_string(degree) + " slices" + (with_targets ? "" : ", no targets");
      // Each slice's rows, its statistics and everyone's gathered, as the model lays them out.
      std::vector<std::vector<Bf16>> parts(static_cast<std::size_t>(degree));
      std::vector<double> gathered(3 * static_cast<std::size_t>(N) * degree);
      for (int p = 0; p < degree; ++p) {
        const int first = p * slice, real = std::clamp(V - first, 0, slice);
        auto& part = parts[static_cast<std::size_t>(p)];
        for (int i = 0; i < N; ++i)
          for (int j = 0; j < slice; ++j) part.push_back(logits[static_cast<std::size_t>(i) * Vp + first + j]);
        double* stats = gathered.data() + 3 * static_cast<std::size_t>(N) * p;
        const int* t = with_targets ? targets.data() : nullptr;
        kernels::classifier_slice_stats(part.data(), t, stats, N, real, slice, first);
        std::vector<double> wide = widened<double>(part), unfused_stats(3 * static_cast<std::size_t>(N));
        kernels::logit_slice_stats(wide.data(), t, unfused_stats.data(), N, real, slice, first);
        for (std::size_t k = 0; k < unfused_stats.size(); ++k)
          EXPECT_EQ(stats[k], unfused_stats[k]) << what << ": statistic " << k << " of slice " << p;
      }
      std::vector<double> row_stats(2 * static_cast<std::size_t>(N)), losses(N);
      const double got = kernels::logit_slices_combine(gathered.data(), row_stats.data(), losses.data(),
                                                       with_targets ? targets.data() : nullptr, N, degree);
      if (with_targets) {
        EXPECT_NEAR(got, want, 1e-12 * std::abs(want)) << what;
        for (int i = 0; i < N; ++i) EXPECT_NEAR(losses[i], whole_losses[i], 1e-12) << what << ", row " << i;
      }
      for (int p = 0; p < degree; ++p) {
        const int first = p * slice, real = std::clamp(V - first, 0, slice);
        auto& part = parts[static_cast<std::size_t>(p)];
        if (with_targets)
          kernels::classifier_slice_dlogits(part.data(), row_stats.data(), targets.data(), N, real, slice, first);
        else kernels::classifier_slice_softmax(part.data(), row_stats.data(), N, real, slice);
        for (int i = 0; i < N; ++i)
          for (int j = 0; j < slice; ++j) {
            const double g = to_float(part[static_cast<std::size_t>(i) * slice + j]);
            const double w = to_float(whole[static_cast<std::size_t>(i) * Vp + first + j]);
            EXPECT_LE(std::abs(g - w), bf16_ulp(w)) << what << ": row " << i << ", column " << first + j;
          }
      }
    }
  }
}

// The head itself: the product of the bf16-rounded operands rounded to bf16, and its backward
// from bf16 d(loss)/d(logits) with the loss's scale applied in the products. Against the unfused
// composition on the same (bf16-representable) operands in double: the linear layer, the
// cross-entropy's softmax and backward with the scale, and the linear layer's backward. The
// fused side rounds d(loss)/d(logits) to bf16 once (2^-9 relative) where the unfused keeps them
// exact, so each gradient is within 2^-8 of its largest element; the loss within 1e-12.
TEST(ClassifierReference, HeadForwardAndBackwardEqualTheUnfusedComposition) {
  const int C = 24;
  const double scale = 0.37;
  const std::vector<int> targets = targets_for(N, V);
  // Operands already bf16: the head's rounding of them changes nothing, so what differs is the
  // fused path's own roundings (the logits and d(loss)/d(logits)).
  auto bf16_exact = [](std::vector<double> v) {
    for (double& x : v) x = to_float(to_bf16(static_cast<float>(x)));
    return v;
  };
  const std::vector<double> in = bf16_exact(random_values<double>(static_cast<std::size_t>(N) * C, 8));
  const std::vector<double> weight = bf16_exact(random_values<double>(static_cast<std::size_t>(Vp) * C, 9));

  std::vector<Bf16> logits(static_cast<std::size_t>(N) * Vp);
  kernels::classifier_logits(logits.data(), in.data(), weight.data(), N, C, Vp);
  std::vector<double> unfused(logits.size());
  kernels::linear_forward(unfused.data(), in.data(), weight.data(), static_cast<const double*>(nullptr), N, C, Vp);
  for (std::size_t i = 0; i < logits.size(); ++i)
    EXPECT_EQ(logits[i].bits, to_bf16(static_cast<float>(unfused[i])).bits) << "logit " << i;

  // The unfused path from the same bf16 logits.
  unfused = widened<double>(logits);
  std::vector<double> losses(N), din_want(static_cast<std::size_t>(N) * C), dweight_want(weight.size(), 0.25);
  const double want = kernels::softmax_cross_entropy_forward(unfused.data(), losses.data(), targets.data(), N, V, Vp);
  kernels::softmax_cross_entropy_backward(unfused.data(), targets.data(), N, V, Vp, scale);
  kernels::linear_backward(din_want.data(), dweight_want.data(), static_cast<double*>(nullptr), unfused.data(), in.data(),
                           weight.data(), N, C, Vp, false);

  std::vector<double> din(din_want.size(), 99.0), dweight(weight.size(), 0.25);  // din overwritten, dweight added to
  const double got = kernels::classifier_cross_entropy(logits.data(), losses.data(), targets.data(), N, V, Vp);
  kernels::classifier_backward(din.data(), dweight.data(), logits.data(), in.data(), weight.data(), N, C, Vp, scale);
  EXPECT_NEAR(got, want, 1e-12 * want);
  auto relative = [](const std::vector<double>& a, const std::vector<double>& b, double offset) {
    double diff = 0, largest = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      diff = std::max(diff, std::abs(a[i] - b[i]));
      largest = std::max(largest, std::abs(b[i] - offset));
    }
    return diff / largest;
  };
  EXPECT_LE(relative(din, din_want, 0.0), std::ldexp(1.0, -8));
  EXPECT_LE(relative(dweight, dweight_want, 0.25), std::ldexp(1.0, -8));
  // And the comparison can fail: the scale matters.
  std::vector<double> unscaled(din.size());
  kernels::classifier_backward(unscaled.data(), dweight.data(), logits.data(), in.data(), weight.data(), N, C, Vp, 1.0);
  EXPECT_GT(relative(unscaled, din_want, 0.0), 0.5);
}

}  // namespace
}  // namespace st
