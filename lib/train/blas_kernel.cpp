#include "train/blas_kernel.hpp"

#include <cblas.h>

#include <vector>

#include "comm/agree.hpp"
#include "comm/values.hpp"
#include "core/text.hpp"

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

}  // namespace st
