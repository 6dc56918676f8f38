#pragma once
namespace st {

// Threads for OpenMP and BLAS on this rank: `requested` if > 0, else the CPUs this process may
// run on, shared among the ranks of the node when they are not bound to separate cores.
int choose_thread_count(int requested, int ranks_on_node);
// Sets both the OpenMP and the OpenBLAS thread counts.
void apply_thread_count(int threads);

}  // namespace st
