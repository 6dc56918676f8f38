#include "exec/threads.hpp"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

namespace st {
namespace {

std::vector<int> cpus_of(const cpu_set_t& set) {
  std::vector<int> cpus;
  for (int i = 0; i < CPU_SETSIZE; ++i)
    if (CPU_ISSET(i, &set)) cpus.push_back(i);
  return cpus;
}

// The calling thread's mask (sched_getaffinity(0) is the thread's, not the process's).
std::vector<int> own_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return {};
  return cpus_of(set);
}

}  // namespace

std::vector<int> given_cpus() {
  if (omp_get_proc_bind() != omp_proc_bind_false && omp_get_num_places() > 0) {
    std::set<int> all;
    for (int p = 0; p < omp_get_num_places(); ++p) {
      std::vector<int> ids(static_cast<std::size_t>(omp_get_place_num_procs(p)));
      omp_get_place_proc_ids(p, ids.data());
      all.insert(ids.begin(), ids.end());
    }
    if (!all.empty()) return {all.begin(), all.end()};
  }
  return own_cpus();
}

std::vector<int> thread_cpus(int threads) {
  std::set<int> all;
  std::mutex lock;
#pragma omp parallel num_threads(std::max(1, threads))
  {
    const std::vector<int> mine = own_cpus();
    const std::lock_guard<std::mutex> hold(lock);
    all.insert(mine.begin(), mine.end());
  }
  return {all.begin(), all.end()};
}

std::string omp_binding() {
  if (omp_get_proc_bind() == omp_proc_bind_false) return "OpenMP does not bind threads";
  const char* bind = std::getenv("OMP_PROC_BIND");
  const char* places = std::getenv("OMP_PLACES");
  return std::string("OMP_PROC_BIND=") + (bind ? bind : "unset") + ", OMP_PLACES=" + (places ? places : "unset") +
         " (" + std::to_string(omp_get_num_places()) + " places)";
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

int choose_thread_count(int requested, int ranks_on_node) {
  if (requested > 0) return requested;
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::vector<int> given = given_cpus();
  const int allowed = given.empty() ? hardware : static_cast<int>(given.size());
  // A launcher that binds ranks gives each a subset: use all of it. Unbound ranks share the node.
  if (allowed < hardware) return std::max(1, allowed);
  return std::max(1, hardware / std::max(1, ranks_on_node));
}

void apply_thread_count(int threads) {
  // BLAS itself runs one thread per call: exec/gemm.hpp spreads a product's tiles over these.
  omp_set_num_threads(threads);
}

}  // namespace st
