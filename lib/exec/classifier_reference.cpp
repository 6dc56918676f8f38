#include "exec/classifier_reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "exec/host_kernels.hpp"
#include "exec/ordered_sum.hpp"

namespace st::kernels {
namespace {

template <class R>
R widen(Bf16 x) {
  return static_cast<R>(to_float(x));
}

template <class R>
Bf16 narrow(R x) {
  return to_bf16(static_cast<float>(x));
}

// A copy of n values rounded to bf16 and back: a product's operand as the device's tensor cores see it.
template <class R>
std::vector<R> rounded(const R* values, std::size_t n) {
  std::vector<R> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = widen<R>(narrow(values[i]));
  return out;
}

// The max over a row's first V entries (-inf for none) and the sum of e^(x - max) over them.
template <class R>
void row_max_and_sum(const Bf16* row, int V, R& max, double& sum) {
  max = -std::numeric_limits<R>::infinity();
  for (int j = 0; j < V; ++j) max = std::max(max, widen<R>(row[j]));
  sum = 0;
  for (int j = 0; j < V; ++j) sum += static_cast<double>(std::exp(widen<R>(row[j]) - max));
}

}  // namespace

template <class R>
void classifier_logits(Bf16* logits, const R* in, const R* weight, int N, int C, int OC) {
  const auto n = static_cast<std::size_t>(N), c = static_cast<std::size_t>(C), oc = static_cast<std::size_t>(OC);
  const std::vector<R> x = rounded(in, n * c), w = rounded(weight, oc * c);
  std::vector<R> out(n * oc);
  linear_forward(out.data(), x.data(), w.data(), static_cast<const R*>(nullptr), N, C, OC);
  for (std::size_t i = 0; i < out.size(); ++i) logits[i] = narrow(out[i]);
}

template <class R>
double classifier_cross_entropy(Bf16* logits_to_dlogits, R* losses, const int* targets, int N, int V, int Vp) {
  return ordered_parallel_sum(static_cast<std::size_t>(N), 1, [&](std::size_t i) {
    Bf16* row = logits_to_dlogits + i * static_cast<std::size_t>(Vp);
    R max;
    double sum;
    row_max_and_sum(row, V, max, sum);
    const int target = targets[i];
    const double loss = std::log(sum) + static_cast<double>(max) - static_cast<double>(widen<R>(row[target]));
    const R inv = static_cast<R>(1.0 / sum);
    for (int j = 0; j < Vp; ++j) {
      const R p = j < V ? std::exp(widen<R>(row[j]) - max) * inv : R(0);
      row[j] = narrow(j == target ? p - R(1) : p);
    }
    losses[i] = static_cast<R>(loss);
    return loss;
  });
}

template <class R>
void classifier_slice_stats(const Bf16* logits, const int* targets, R* stats, int N, int V, int Vp, int first) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const Bf16* row = logits + static_cast<std::size_t>(i) * Vp;
    R max;
    double sum;
    row_max_and_sum(row, V, max, sum);
    R* out = stats + 3 * static_cast<std::size_t>(i);
    out[0] = max;
    out[1] = static_cast<R>(sum);
    const int local = targets ? targets[i] - first : -1;
    out[2] = local >= 0 && local < V ? widen<R>(row[local]) : R(0);
  }
}

template <class R>
void classifier_slice_dlogits(Bf16* logits_to_dlogits, const R* row_stats, const int* targets, int N, int V, int Vp,
                              int first) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    Bf16* row = logits_to_dlogits + static_cast<std::size_t>(i) * Vp;
    const R max = row_stats[2 * i];
    const R inv = static_cast<R>(1.0 / static_cast<double>(row_stats[2 * i + 1]));
    const int local = targets[i] - first;
    for (int j = 0; j < Vp; ++j) {
      const R p = j < V ? std::exp(widen<R>(row[j]) - max) * inv : R(0);
      row[j] = narrow(j == local ? p - R(1) : p);
    }
  }
}

template <class R>
void classifier_softmax(Bf16* logits_to_probs, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    Bf16* row = logits_to_probs + static_cast<std::size_t>(i) * Vp;
    R max;
    double sum;
    row_max_and_sum(row, V, max, sum);
    const R inv = static_cast<R>(1.0 / sum);
    for (int j = 0; j < Vp; ++j) row[j] = narrow(j < V ? std::exp(widen<R>(row[j]) - max) * inv : R(0));
  }
}

template <class R>
void classifier_slice_softmax(Bf16* logits_to_probs, const R* row_stats, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    Bf16* row = logits_to_probs + static_cast<std::size_t>(i) * Vp;
    const R max = row_stats[2 * i];
    const R inv = static_cast<R>(1.0 / static_cast<double>(row_stats[2 * i + 1]));
    for (int j = 0; j < Vp; ++j) row[j] = narrow(j < V ? std::exp(widen<R>(row[j]) - max) * inv : R(0));
  }
}

template <class R>
void classifier_backward(R* din, R* dweight, const Bf16* dlogits, const R* in, const R* weight, int N, int C, int OC,
                         R scale) {
  const auto n = static_cast<std::size_t>(N), c = static_cast<std::size_t>(C), oc = static_cast<std::size_t>(OC);
  std::vector<R> d(n * oc);
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = scale * widen<R>(dlogits[i]);
  const std::vector<R> x = rounded(in, n * c), w = rounded(weight, oc * c);
  linear_backward(din, dweight, static_cast<R*>(nullptr), d.data(), x.data(), w.data(), N, C, OC, false);
}

#define ST_INSTANTIATE_CLASSIFIER(R)                                                                \
  template void classifier_logits<R>(Bf16*, const R*, const R*, int, int, int);                     \
  template double classifier_cross_entropy<R>(Bf16*, R*, const int*, int, int, int);                \
  template void classifier_slice_stats<R>(const Bf16*, const int*, R*, int, int, int, int);         \
  template void classifier_slice_dlogits<R>(Bf16*, const R*, const int*, int, int, int, int);       \
  template void classifier_softmax<R>(Bf16*, int, int, int);                                        \
  template void classifier_slice_softmax<R>(Bf16*, const R*, int, int, int);                        \
  template void classifier_backward<R>(R*, R*, const Bf16*, const R*, const R*, int, int, int, R);

ST_INSTANTIATE_CLASSIFIER(float)
ST_INSTANTIATE_CLASSIFIER(double)

}  // namespace st::kernels
