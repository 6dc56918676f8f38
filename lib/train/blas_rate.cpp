#include "train/blas_rate.hpp"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "comm/agree.hpp"
#include "core/text.hpp"
#include "core/timer.hpp"
#include "exec/gemm.hpp"

namespace st {

std::string blas_description() {
  const int parallel = openblas_get_parallel();
  std::string config = openblas_get_config();
  while (!config.empty() && config.back() == ' ') config.pop_back();
  // The build string names the target the library was built for; the kernel in use is picked
  // at run time for this CPU (OPENBLAS_CORETYPE overrides it), and it sets the speed.
  return config + ", kernel " + openblas_get_corename() +
         (parallel == 2 ? " (OpenMP threading)" : parallel == 1 ? " (pthreads: may oversubscribe)" : " (sequential)");
}

std::string blas_kernel_mismatch(MPI_Comm comm) {
  const std::vector<std::string> kernels = all_gather_text(openblas_get_corename(), comm);
  // "Haswell on ranks 0-1, SkylakeX on ranks 2-3": runs of consecutive ranks with one kernel.
  std::vector<std::string> runs;
  for (std::size_t r = 0; r < kernels.size();) {
    std::size_t end = r;
    while (end + 1 < kernels.size() && kernels[end + 1] == kernels[r]) ++end;
    runs.push_back(kernels[r] + (end > r ? " on ranks " + std::to_string(r) + "-" + std::to_string(end)
                                         : " on rank " + std::to_string(r)));
    r = end + 1;
  }
  if (runs.size() == 1) return "";
  return "ranks use different BLAS kernels: " + join(runs, ", ") +
         "; each sums in its own order, so the run's last bits depend on where a rank runs (a resume elsewhere will "
         "not continue bit for bit). Set OPENBLAS_CORETYPE alike for every rank (mpirun -x OPENBLAS_CORETYPE)";
}

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
