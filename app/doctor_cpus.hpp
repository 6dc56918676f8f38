#pragma once
// `shardtrain doctor`'s view of the CPUs: where each rank's OpenMP threads run against what the
// launcher gave it, and what a rank computes with every rank busy against one rank alone.
#include <string>

#include "comm/world.hpp"

namespace st::app {

// One check's verdict: its line, and when something is wrong, the fix (empty when it is fine).
struct CpuCheck {
  std::string detail;
  std::string fix;
  bool problem() const { return !fix.empty(); }
};

// Each host's ranks: the CPUs the launcher gave each and those its `threads` OpenMP threads may
// run on. A problem when two ranks' threads share a CPU while another CPU of the host that the
// job may use (its cgroup's cpuset, else every online CPU) runs none of them: the ranks take
// turns on the shared CPUs while that one idles. Collective over the world; complete on rank 0.
CpuCheck check_cpu_sets(const World& world, int threads);

// The sgemm probe: the first rank of each host alone (the others wait without spinning), then
// every rank at once, each sustained over `seconds`: both in this run, so the node's rate is
// measured, not assumed. A rank below kSharedRate of its host's lone rate, on a host with
// several ranks, shares its CPUs (with another rank, a hyperthread sibling or another job). Two
// ranks on one CPU make each about 0.5 (0.45-0.58 measured on a 2-core host with other jobs
// running); a rank with a core of its own measures close to 1 unless something else runs there.
// A rank alone on its host is not
// judged: its two figures are the same measurement twice. Collective; complete on rank 0.
constexpr double kSharedRate = 0.6;
CpuCheck probe_sgemm(const World& world, double seconds);

}  // namespace st::app
