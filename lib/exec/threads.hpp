#pragma once
#include <string>
#include <vector>

namespace st {

// Threads for OpenMP and BLAS on this rank: `requested` if > 0, else the CPUs this process was
// given (given_cpus), shared among the ranks of the node when they are not bound to separate cores.
int choose_thread_count(int requested, int ranks_on_node);
// Sets the OpenMP thread count (matrix products use them too: exec/gemm.hpp).
void apply_thread_count(int threads);

// The CPUs the launcher gave this process. Where OpenMP binds threads (OMP_PROC_BIND), its
// runtime pins the first thread to the first place as it starts, so the process's mask then
// holds that place only: the union of OpenMP's places, which the runtime built from the mask
// the process started with, is what it was given. Elsewhere, the process's mask.
std::vector<int> given_cpus();
// The CPUs `threads` OpenMP threads of this rank may run on, as the runtime binds them: the union
// of what each thread of a parallel region of that size is allowed.
std::vector<int> thread_cpus(int threads);
// How OpenMP binds: "OMP_PROC_BIND=close, OMP_PLACES=cores (2 places)", or "unbound".
std::string omp_binding();
// A CPU list as Linux writes one (Cpus_allowed_list): "0-3,8".
std::string cpu_list(const std::vector<int>& cpus);

}  // namespace st
