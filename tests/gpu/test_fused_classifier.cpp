// The fused classifier on the device (exec/cuda/classifier.cu), through the layer-kernel seam as
// the models call it, against its host reference (exec/classifier_reference.hpp) in double on
// the same bf16 logits; the reference is itself tested against the unfused host kernels
// (tests/unit/test_classifier_reference.cpp). Whole rows with targets (the loss and softmax -
// onehot in place) and without (probabilities); vocabulary slices (statistics, then each slice's
// rows from combined statistics, also through the device's own logit_slices_combine); the head's
// product into bf16 logits and its backward from bf16 d(loss)/d(logits). Vocabularies of 33 in
// rows of 41 (the scalar path), 1000 in 1024 and GPT-2's 50257 in 50304 (16-byte vectors).
// Skips, saying why, where no CUDA device is usable.
//
// Bounds. The device computes each element from the same bf16 logit with the reference's
// expression in fp32; what differs before the one rounding to bf16 is fp32's: expf and the
// product (a few fp32 units), and the row's sum of exponentials, summed in another order
// (each thread's ~100 terms, then a tree of 512): at most (100 + 9 + 4) 2^-24 < 1e-5 relative,
// so a probability p moves by at most 1e-5 p. Each output is then within one bf16 unit of the
// reference's plus 1e-5 p (the target's p - 1 cancels, so its error is absolute in p). The loss,
// log sum + max - x[target], moves by the sum's relative error: 2e-5 per row. Statistics: the
// max and the target's logit are bf16 values, equal exactly; the sum within 1e-5. From the same
// combined statistics the slice's write pass has no sum of its own: 1e-6 p. The head's products
// have bf16 operands whose products are exact in fp32, so they differ from the reference only in
// the fp32 sums: at most 2 K 2^-24 of the sum of |terms| (the classic bound for a sum of K
// terms in any order, doubled for tensor-core accumulation), plus the result's own rounding
// (one bf16 unit for the logits, one fp32 unit for the gradients). A wrong column, row, slice
// offset or scale moves results by the size of a probability: hundreds of times these bounds.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "exec/classifier_reference.hpp"
#include "exec/cuda/cuda_exec.hpp"
#include "exec/host_kernels.hpp"
#include "exec/layer_kernels.hpp"
#include "device_test.hpp"

namespace st {
namespace {

constexpr double kSumRelative = 1e-5;   // the row's sum of exponentials, another order
constexpr double kWriteRelative = 1e-6;  // one element from given statistics
constexpr double kLossAbsolute = 2e-5;

struct Vocabulary {
  int N, V, Vp;
  std::string name() const {
    return std::to_string(N) + " rows of " + std::to_string(V) + " in " + std::to_string(Vp);
  }
};
const Vocabulary kVocabularies[] = {{7, 33, 41}, {9, 1000, 1024}, {12, 50257, 50304}};

// One unit in the last place of bf16 at x.
double bf16_ulp(double x) { return std::ldexp(1.0, std::ilogb(std::max(std::abs(x), 1e-30)) - 7); }

// Logits as a head writes them: bf16, spread (sd 3), one row with a dominant logit at its target
// (p near 1: softmax - onehot cancels there) and one with a tie for the max.
std::vector<Bf16> random_logits(const Vocabulary& v, const std::vector<int>& targets, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 3.0);
  std::vector<Bf16> out(static_cast<std::size_t>(v.N) * v.Vp);
  for (auto& x : out) x = to_bf16(static_cast<float>(normal(rng)));
  out[static_cast<std::size_t>(v.Vp) + targets[1]] = to_bf16(30.0f);  // row 1: p(target) ~ 1
  out[2 * static_cast<std::size_t>(v.Vp)] = to_bf16(20.0f);          // row 2: a tie at the max
  out[2 * static_cast<std::size_t>(v.Vp) + v.V - 1] = to_bf16(20.0f);
  return out;
}

std::vector<int> targets_for(const Vocabulary& v) {
  std::vector<int> t(static_cast<std::size_t>(v.N));
  for (int i = 0; i < v.N; ++i) t[static_cast<std::size_t>(i)] = static_cast<int>((i * 7919L + 3) % v.V);
  t.front() = 0;  // the first and the last real column
  t.back() = v.V - 1;
  return t;
}

std::vector<double> random_doubles(std::size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> out(n);
  for (auto& x : out) x = normal(rng);
  return out;
}

class FusedClassifierDevice : public testing_support::DeviceTest {
 public:
  LayerKernels<float>& kernels() { return exec->layer_kernels(); }
};

// Each element within one bf16 unit of the reference's, plus `relative` of its probability (the
// reference's value, plus 1 at the target); padding exactly 0. Returns how many are bit-equal.
std::size_t expect_rows_close(const std::vector<Bf16>& got, const std::vector<Bf16>& want, const int* targets, int V,
                              int Vp, int first, double relative, const std::string& what) {
  std::size_t equal = 0, failures = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const int j = static_cast<int>(i % static_cast<std::size_t>(Vp));
    const std::size_t row = i / static_cast<std::size_t>(Vp);
    equal += got[i].bits == want[i].bits;
    if (j >= V) {
      if (got[i].bits != 0 && failures++ < 5) ADD_FAILURE() << what << ": padded column " << j << " of row " << row;
      continue;
    }
    const double g = to_float(got[i]), w = to_float(want[i]);
    const double p = w + (targets && targets[row] - first == j ? 1.0 : 0.0);
    const double bound = bf16_ulp(std::max(std::abs(g), std::abs(w))) + relative * std::abs(p);
    if (!(std::abs(g - w) <= bound) && failures++ < 5)
      ADD_FAILURE() << what << ": row " << row << ", column " << first + j << ": " << g << " against " << w
                    << " (bound " << bound << ")";
  }
  EXPECT_EQ(failures, 0u) << what;
  return equal;
}

TEST_F(FusedClassifierDevice, WholeRowsGiveTheReferencesLossesAndDlogits) {
  EXPECT_TRUE(kernels().fused_classifier()) << "bf16 matmuls claim the fused classifier";
  CudaExec fp32(CudaExecSettings{0, false, true}), unfused(CudaExecSettings{0, true, true, false});
  EXPECT_FALSE(fp32.layer_kernels().fused_classifier()) << "fp32 keeps the unfused path";
  EXPECT_FALSE(unfused.layer_kernels().fused_classifier()) << "parallel.classifier = \"unfused\"";
  for (const Vocabulary& v : kVocabularies) {
    const std::vector<int> targets = targets_for(v);
    const std::vector<Bf16> logits = random_logits(v, targets, 11);
    std::vector<Bf16> want = logits;
    std::vector<double> want_losses(static_cast<std::size_t>(v.N));
    const double want_total =
        kernels::classifier_cross_entropy(want.data(), want_losses.data(), targets.data(), v.N, v.V, v.Vp);

    Memory rows = upload(logits), target_memory = upload(targets);
    Memory losses = upload(std::vector<float>(static_cast<std::size_t>(v.N), NAN));  // every one written
    auto* rows_p = static_cast<Bf16*>(rows.data());
    const double total = testing_support::device_loss_sum(*exec, [&](LossSum loss) {
      kernels().classifier_cross_entropy(rows_p, static_cast<float*>(losses.data()),
                                         static_cast<const int*>(target_memory.data()), v.N, v.V, v.Vp, loss);
    });
    const std::vector<Bf16> got = download<Bf16>(rows, logits.size());
    const std::vector<float> got_losses = download<float>(losses, static_cast<std::size_t>(v.N));
    EXPECT_NEAR(total, want_total, kLossAbsolute * v.N) << v.name();
    for (int i = 0; i < v.N; ++i)
      EXPECT_NEAR(got_losses[static_cast<std::size_t>(i)], want_losses[static_cast<std::size_t>(i)],
                  kLossAbsolute + 1e-6 * want_losses[static_cast<std::size_t>(i)])
          << v.name() << ", row " << i;
    const std::size_t equal =
        expect_rows_close(got, want, targets.data(), v.V, v.Vp, 0, kSumRelative, v.name() + ", with targets");
    std::cout << v.name() << ": " << equal << " of " << got.size() << " values bit-equal to the reference\n";

    // Deterministic: the same logits give the same bits and the same loss sum.
    exec->upload(rows_p, logits.data(), logits.size() * sizeof(Bf16));
    const double again = testing_support::device_loss_sum(*exec, [&](LossSum loss) {
      kernels().classifier_cross_entropy(rows_p, static_cast<float*>(losses.data()),
                                         static_cast<const int*>(target_memory.data()), v.N, v.V, v.Vp, loss);
    });
    EXPECT_EQ(again, total) << v.name();
    const std::vector<Bf16> got_again = download<Bf16>(rows, logits.size());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), got_again.begin(),
                           [](Bf16 a, Bf16 b) { return a.bits == b.bits; }))
        << v.name() << ": a second run gave other bits";
  }
}

TEST_F(FusedClassifierDevice, WholeRowsWithoutTargetsGiveTheReferencesProbabilities) {
  for (const Vocabulary& v : kVocabularies) {
    const std::vector<int> targets = targets_for(v);
    const std::vector<Bf16> logits = random_logits(v, targets, 12);
    std::vector<Bf16> want = logits;
    kernels::classifier_softmax<double>(want.data(), v.N, v.V, v.Vp);
    Memory rows = upload(logits);
    kernels().classifier_softmax(static_cast<Bf16*>(rows.data()), v.N, v.V, v.Vp);
    const std::vector<Bf16> got = download<Bf16>(rows, logits.size());
    expect_rows_close(got, want, nullptr, v.V, v.Vp, 0, kSumRelative, v.name() + ", no targets");
    for (int i = 0; i < v.N; ++i) {
      double sum = 0;
      for (int j = 0; j < v.V; ++j) sum += to_float(got[static_cast<std::size_t>(i) * v.Vp + j]);
      EXPECT_NEAR(sum, 1.0, 1e-2) << v.name() << ", row " << i;  // one bf16 rounding per entry
    }
  }
}

// The vocabulary split into `degree` slices of Vp / degree columns (1024 / 8 = 128: vectors;
// 40 / 8 = 5: the scalar path, the last slice padding only). Each slice's statistics against the
// reference's; then from the same combined statistics (the reference's, in float as the device
// keeps them) each slice's rows, with and without targets; then the whole device path (its
// statistics, its logit_slices_combine, its write pass) against the whole row's reference.
TEST_F(FusedClassifierDevice, VocabularySlicesGiveTheReferencesStatisticsAndRows) {
  for (const Vocabulary& whole : {Vocabulary{9, 1000, 1024}, Vocabulary{7, 33, 40}}) {
    const std::vector<int> targets = targets_for(whole);
    const std::vector<Bf16> logits = random_logits(whole, targets, 13);
    std::vector<Bf16> whole_want = logits;
    std::vector<double> whole_losses(static_cast<std::size_t>(whole.N));
    kernels::classifier_cross_entropy(whole_want.data(), whole_losses.data(), targets.data(), whole.N, whole.V,
                                      whole.Vp);
    Memory target_memory = upload(targets);
    const auto* targets_d = static_cast<const int*>(target_memory.data());
    for (const int degree : {2, 8}) {
      const int slice = whole.Vp / degree, N = whole.N;
      const std::string what = whole.name() + ", " + std::to_string(degree) + " slices";
      std::vector<std::vector<Bf16>> parts(static_cast<std::size_t>(degree));
      std::vector<double> gathered(3 * static_cast<std::size_t>(N) * degree);
      std::vector<float> device_gathered(gathered.size());
      for (int p = 0; p < degree; ++p) {
        const int first = p * slice, real = std::clamp(whole.V - first, 0, slice);
        auto& part = parts[static_cast<std::size_t>(p)];
        for (int i = 0; i < N; ++i)
          for (int j = 0; j < slice; ++j) part.push_back(logits[static_cast<std::size_t>(i) * whole.Vp + first + j]);
        double* want = gathered.data() + 3 * static_cast<std::size_t>(N) * p;
        kernels::classifier_slice_stats(part.data(), targets.data(), want, N, real, slice, first);
        Memory rows = upload(part), stats = upload(std::vector<float>(3 * static_cast<std::size_t>(N), NAN));
        kernels().classifier_slice_stats(static_cast<const Bf16*>(rows.data()), targets_d,
                                         static_cast<float*>(stats.data()), N, real, slice, first);
        const std::vector<float> got = download<float>(stats, 3 * static_cast<std::size_t>(N));
        std::copy(got.begin(), got.end(), device_gathered.begin() + 3 * static_cast<std::ptrdiff_t>(N) * p);
        for (int i = 0; i < N; ++i) {
          const std::size_t at = 3 * static_cast<std::size_t>(i);
          EXPECT_EQ(got[at], want[at]) << what << ": max, slice " << p << ", row " << i;
          EXPECT_NEAR(got[at + 1], want[at + 1], kSumRelative * want[at + 1]) << what << ": sum, slice " << p;
          EXPECT_EQ(got[at + 2], want[at + 2]) << what << ": target's logit, slice " << p << ", row " << i;
        }
      }
      // The combined statistics, in float as the device holds them, for both write passes.
      std::vector<double> row_stats(2 * static_cast<std::size_t>(N)), losses(static_cast<std::size_t>(N));
      kernels::logit_slices_combine(gathered.data(), row_stats.data(), losses.data(), targets.data(), N, degree);
      std::vector<float> row_stats_f(row_stats.begin(), row_stats.end());
      const std::vector<double> row_stats_as_device(row_stats_f.begin(), row_stats_f.end());
      Memory row_stats_d = upload(row_stats_f);
      // The device's own combine from its own statistics.
      Memory gathered_d = upload(device_gathered), own_row_stats = upload(std::vector<float>(2 * N, NAN)),
             own_losses = upload(std::vector<float>(static_cast<std::size_t>(N), NAN));
      const double own_total = testing_support::device_loss_sum(*exec, [&](LossSum loss) {
        kernels().logit_slices_combine(static_cast<const float*>(gathered_d.data()),
                                       static_cast<float*>(own_row_stats.data()), static_cast<float*>(own_losses.data()),
                                       targets_d, N, degree, loss);
      });
      double want_total = 0;
      for (const double l : whole_losses) want_total += l;
      EXPECT_NEAR(own_total, want_total, kLossAbsolute * N) << what;
      for (const bool with_targets : {true, false}) {
        for (int p = 0; p < degree; ++p) {
          const int first = p * slice, real = std::clamp(whole.V - first, 0, slice);
          const std::string which = what + ", slice " + std::to_string(p) + (with_targets ? "" : ", no targets");
          std::vector<Bf16> want = parts[static_cast<std::size_t>(p)];
          Memory rows = upload(want), own_rows = upload(want);
          auto* rows_p = static_cast<Bf16*>(rows.data());
          auto* own_p = static_cast<Bf16*>(own_rows.data());
          const auto* given = static_cast<const float*>(row_stats_d.data());
          const auto* own = static_cast<const float*>(own_row_stats.data());
          if (with_targets) {
            kernels::classifier_slice_dlogits(want.data(), row_stats_as_device.data(), targets.data(), N, real, slice,
                                              first);
            kernels().classifier_slice_dlogits(rows_p, given, targets_d, N, real, slice, first);
            kernels().classifier_slice_dlogits(own_p, own, targets_d, N, real, slice, first);
          } else {
            kernels::classifier_slice_softmax(want.data(), row_stats_as_device.data(), N, real, slice);
            kernels().classifier_slice_softmax(rows_p, given, N, real, slice);
            kernels().classifier_slice_softmax(own_p, own, N, real, slice);
          }
          const int* t = with_targets ? targets.data() : nullptr;
          expect_rows_close(download<Bf16>(rows, want.size()), want, t, real, slice, first, kWriteRelative, which);
          if (!with_targets) continue;
          // The whole device path against the whole row's reference.
          std::vector<Bf16> whole_part;
          for (int i = 0; i < N; ++i)
            for (int j = 0; j < slice; ++j)
              whole_part.push_back(whole_want[static_cast<std::size_t>(i) * whole.Vp + first + j]);
          expect_rows_close(download<Bf16>(own_rows, want.size()), whole_part, t, real, slice, first, kSumRelative,
                            which + ", the device's own combine");
        }
      }
    }
  }
}

// 2 K 2^-24 of the sum of |terms| of each element of a product, plus one fp32 unit of it.
double sum_bound(double sum_of_magnitudes, int K, double value) {
  return 2.0 * K * std::ldexp(sum_of_magnitudes, -24) + std::ldexp(std::abs(value), -23);
}

// The head: bf16 logits from the bf16-rounded operands, and the backward from the reference's
// bf16 d(loss)/d(logits) with the loss's scale (din overwritten, dweight added to).
TEST_F(FusedClassifierDevice, HeadProductsEqualTheReferencesWithinFp32Sums) {
  const int N = 37, C = 96, OC = 1024, V = 1000;
  const double scale = 0.37;
  const std::vector<double> in = random_doubles(static_cast<std::size_t>(N) * C, 21);
  const std::vector<double> weight = random_doubles(static_cast<std::size_t>(OC) * C, 22);
  auto rounded = [](const std::vector<double>& v) {
    std::vector<double> r(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) r[i] = to_float(to_bf16(static_cast<float>(v[i])));
    return r;
  };
  const std::vector<double> x = rounded(in), w = rounded(weight);
  const std::vector<float> in_f(in.begin(), in.end()), weight_f(weight.begin(), weight.end());
  // The reference from the same fp32 inputs the device gets (its rounding to bf16 is the device's).
  const std::vector<double> in_d(in_f.begin(), in_f.end()), weight_d(weight_f.begin(), weight_f.end());

  std::vector<Bf16> want(static_cast<std::size_t>(N) * OC);
  kernels::classifier_logits(want.data(), in_d.data(), weight_d.data(), N, C, OC);
  Memory in_m = upload(in_f), weight_m = upload(weight_f), logits = upload(std::vector<Bf16>(want.size(), to_bf16(NAN)));
  const auto* in_p = static_cast<const float*>(in_m.data());
  const auto* weight_p = static_cast<const float*>(weight_m.data());
  kernels().classifier_logits(static_cast<Bf16*>(logits.data()), in_p, weight_p, N, C, OC);
  const std::vector<Bf16> got = download<Bf16>(logits, want.size());
  std::size_t failures = 0;
  for (int i = 0; i < N; ++i)
    for (int o = 0; o < OC; ++o) {
      double magnitudes = 0;
      for (int c = 0; c < C; ++c) magnitudes += std::abs(x[static_cast<std::size_t>(i) * C + c] * w[static_cast<std::size_t>(o) * C + c]);
      const std::size_t at = static_cast<std::size_t>(i) * OC + o;
      const double g = to_float(got[at]), r = to_float(want[at]);
      const double bound = bf16_ulp(std::max(std::abs(g), std::abs(r))) + sum_bound(magnitudes, C, r);
      if (!(std::abs(g - r) <= bound) && failures++ < 5)
        ADD_FAILURE() << "logit (" << i << ", " << o << "): " << g << " against " << r << " (bound " << bound << ")";
    }
  EXPECT_EQ(failures, 0u) << "logits";

  // d(loss)/d(logits) from the reference, over the first V columns (the rest padding).
  std::vector<int> targets(static_cast<std::size_t>(N));
  for (int i = 0; i < N; ++i) targets[static_cast<std::size_t>(i)] = (i * 31 + 5) % V;
  std::vector<double> losses(static_cast<std::size_t>(N));
  kernels::classifier_cross_entropy(want.data(), losses.data(), targets.data(), N, V, OC);
  std::vector<double> din_want(static_cast<std::size_t>(N) * C), dweight_want(weight.size(), 0.25);
  kernels::classifier_backward(din_want.data(), dweight_want.data(), want.data(), in_d.data(), weight_d.data(), N, C,
                               OC, scale);
  Memory dlogits = upload(want), din = upload(std::vector<float>(din_want.size(), NAN)),
         dweight = upload(std::vector<float>(weight.size(), 0.25f));
  kernels().classifier_backward(static_cast<float*>(din.data()), static_cast<float*>(dweight.data()),
                                static_cast<const Bf16*>(dlogits.data()), in_p, weight_p, N, C, OC,
                                static_cast<float>(scale));
  const std::vector<float> din_got = download<float>(din, din_want.size());
  const std::vector<float> dweight_got = download<float>(dweight, dweight_want.size());
  auto d = [&](int i, int o) { return scale * to_float(want[static_cast<std::size_t>(i) * OC + o]); };
  failures = 0;
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < C; ++c) {
      double magnitudes = 0;
      for (int o = 0; o < OC; ++o) magnitudes += std::abs(d(i, o) * w[static_cast<std::size_t>(o) * C + c]);
      const std::size_t at = static_cast<std::size_t>(i) * C + c;
      const double bound = sum_bound(magnitudes, OC, din_want[at]);
      if (!(std::abs(din_got[at] - din_want[at]) <= bound) && failures++ < 5)
        ADD_FAILURE() << "din (" << i << ", " << c << "): " << din_got[at] << " against " << din_want[at] << " (bound "
                      << bound << ")";
    }
  EXPECT_EQ(failures, 0u) << "din";
  failures = 0;
  for (int o = 0; o < OC; ++o)
    for (int c = 0; c < C; ++c) {
      double magnitudes = 0.25;  // the gradient it is added to
      for (int i = 0; i < N; ++i) magnitudes += std::abs(d(i, o) * x[static_cast<std::size_t>(i) * C + c]);
      const std::size_t at = static_cast<std::size_t>(o) * C + c;
      const double bound = sum_bound(magnitudes, N + 1, dweight_want[at]);
      if (!(std::abs(dweight_got[at] - dweight_want[at]) <= bound) && failures++ < 5)
        ADD_FAILURE() << "dweight (" << o << ", " << c << "): " << dweight_got[at] << " against " << dweight_want[at]
                      << " (bound " << bound << ")";
    }
  EXPECT_EQ(failures, 0u) << "dweight";
  // Padded rows of the head get no gradient but the 0.25 already there.
  for (int o = V; o < OC; ++o) EXPECT_EQ(dweight_got[static_cast<std::size_t>(o) * C], 0.25f) << "padded row " << o;
}

}  // namespace
}  // namespace st
