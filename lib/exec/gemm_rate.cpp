#include "exec/gemm_rate.hpp"

#include <algorithm>
#include <vector>

#include "core/timer.hpp"
#include "exec/gemm.hpp"

namespace st {

double measure_sgemm_flops(int m, int n, int k, double min_seconds) {
  std::vector<float> a(static_cast<std::size_t>(m) * k, 0.5f), b(static_cast<std::size_t>(n) * k, 0.25f),
      c(static_cast<std::size_t>(m) * n, 0.0f);
  const double flops = 2.0 * m * n * k;
  // Warm up with the three products a linear layer of this shape makes: the forward a b^T, the
  // input gradient c b and the weight gradient c^T a. Each packs its operands through its own
  // span of the library's buffer; touched here, that span is resident before the run's memory
  // is measured (it is the library's, not the run's).
  gemm(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), n);
  gemm(false, false, m, k, n, 1.0f, c.data(), n, b.data(), k, 0.0f, a.data(), k);
  gemm(true, false, n, k, m, 1.0f, c.data(), n, a.data(), k, 0.0f, b.data(), k);
  std::fill(a.begin(), a.end(), 0.5f);  // the warm-up wrote over them: time the product on small values
  std::fill(b.begin(), b.end(), 0.25f);
  double best = 0;
  Stopwatch total;
  int runs = 0;
  // The best of at least five runs over at least min_seconds: a run that another process
  // disturbed only lowers a sample, and the best is what the cores do undisturbed.
  while (runs < 5 || total.seconds() < min_seconds) {
    Stopwatch one;
    gemm(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), n);
    best = std::max(best, flops / std::max(one.seconds(), 1e-9));
    if (++runs >= 200) break;
  }
  return best;
}

double measure_sgemm_throughput(int m, int n, int k, double seconds) {
  std::vector<float> a(static_cast<std::size_t>(m) * k, 0.5f), b(static_cast<std::size_t>(n) * k, 0.25f),
      c(static_cast<std::size_t>(m) * n, 0.0f);
  gemm(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), n);  // packing buffers, threads
  Stopwatch total;
  int runs = 0;
  while (runs < 3 || total.seconds() < seconds) {
    gemm(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), n);
    ++runs;
  }
  return 2.0 * m * n * k * runs / total.seconds();
}

}  // namespace st
