#include "train/threads.hpp"

#include <cblas.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <thread>

namespace st {

int choose_thread_count(int requested, int ranks_on_node) {
  if (requested > 0) return requested;
  cpu_set_t set;
  CPU_ZERO(&set);
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int allowed = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : hardware;
  // A launcher that binds ranks gives each a subset: use all of it. Unbound ranks share the node.
  if (allowed < hardware) return std::max(1, allowed);
  return std::max(1, hardware / std::max(1, ranks_on_node));
}

void apply_thread_count(int threads) {
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

}  // namespace st
