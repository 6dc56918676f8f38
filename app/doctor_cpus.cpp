#include "app/doctor_cpus.hpp"

#include <sched.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "comm/group.hpp"
#include "comm/values.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "exec/gemm_rate.hpp"
#include "exec/threads.hpp"

namespace st::app {
namespace {

constexpr int kName = 256, kBinding = 160;
constexpr std::size_t kRanksShown = 8;  // per host, in the OK line

// What one rank reports: sent as bytes, gathered on rank 0.
struct RankCpus {
  char host[kName];
  char binding[kBinding];
  cpu_set_t given;    // what the launcher gave the rank
  cpu_set_t threads;  // where its OpenMP threads may run
  cpu_set_t usable;   // what the job may use on its host
};

cpu_set_t set_of(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int c : cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  return set;
}

std::vector<int> cpus_in(const cpu_set_t& set) {
  std::vector<int> cpus;
  for (int i = 0; i < CPU_SETSIZE; ++i)
    if (CPU_ISSET(i, &set)) cpus.push_back(i);
  return cpus;
}

// "0-3,8" -> {0, 1, 2, 3, 8}; what cannot be read is left out.
std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    int lo = 0, hi = 0;
    const int read = std::sscanf(part.c_str(), "%d-%d", &lo, &hi);
    if (read < 1) continue;
    if (read == 1) hi = lo;
    for (int c = lo; c <= hi && c < CPU_SETSIZE; ++c) cpus.push_back(c);
  }
  return cpus;
}

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The CPUs of this host the job may use: its cgroup's cpuset (what a batch system that confines
// jobs gave this one; cgroup v1 or v2), else every online CPU. CPUs outside it are another job's.
std::vector<int> host_cpus() {
  std::ifstream cgroups("/proc/self/cgroup");
  std::string line, v1, v2;
  while (std::getline(cgroups, line)) {
    const std::size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) v2 = "/sys/fs/cgroup" + path + "/cpuset.cpus.effective";
    std::stringstream names(controllers);
    std::string name;
    while (std::getline(names, name, ','))
      if (name == "cpuset") v1 = "/sys/fs/cgroup/cpuset" + path + "/cpuset.effective_cpus";
  }
  for (const std::string& file : {v1, v2, std::string("/sys/devices/system/cpu/online")}) {
    if (file.empty()) continue;
    const std::vector<int> cpus = parse_cpu_list(first_line(file));
    if (!cpus.empty()) return cpus;
  }
  return {};
}

std::string ranks_list(const std::vector<int>& ranks) {
  std::vector<std::string> names;
  for (const int r : ranks) names.push_back(std::to_string(r));
  return join(names, ",");
}

// One host and its ranks, in world order.
struct HostCpus {
  std::string host;
  std::vector<int> ranks;
};

}  // namespace

CpuCheck check_cpu_sets(const World& world, int threads) {
  RankCpus mine{};
  std::strncpy(mine.host, world.host().c_str(), kName - 1);
  std::strncpy(mine.binding, omp_binding().c_str(), kBinding - 1);
  mine.given = set_of(given_cpus());
  mine.threads = set_of(thread_cpus(threads));
  mine.usable = set_of(host_cpus());
  const std::vector<RankCpus> all = gather_values(mine, 0, world.comm());
  CpuCheck check;
  if (!world.is_root()) return check;

  std::vector<HostCpus> hosts;
  for (int r = 0; r < world.size(); ++r) {
    const std::string host = all[static_cast<std::size_t>(r)].host;
    auto at = std::find_if(hosts.begin(), hosts.end(), [&](const HostCpus& h) { return h.host == host; });
    if (at == hosts.end()) at = hosts.insert(hosts.end(), HostCpus{host, {}});
    at->ranks.push_back(r);
  }
  std::vector<std::string> shown;
  bool shared_anywhere = false;
  for (const HostCpus& h : hosts) {
    const auto rank = [&](int r) -> const RankCpus& { return all[static_cast<std::size_t>(r)]; };
    cpu_set_t given, used, shared;
    CPU_ZERO(&given);
    CPU_ZERO(&used);
    CPU_ZERO(&shared);
    std::vector<int> sharing;  // ranks whose threads share a CPU with another rank's
    for (std::size_t i = 0; i < h.ranks.size(); ++i) {
      const RankCpus& a = rank(h.ranks[i]);
      CPU_OR(&given, &given, &a.given);
      CPU_OR(&used, &used, &a.threads);
      for (std::size_t j = i + 1; j < h.ranks.size(); ++j) {
        cpu_set_t both;
        CPU_AND(&both, &a.threads, &rank(h.ranks[j]).threads);
        if (CPU_COUNT(&both) == 0) continue;
        CPU_OR(&shared, &shared, &both);
        for (const int r : {h.ranks[i], h.ranks[j]})
          if (std::find(sharing.begin(), sharing.end(), r) == sharing.end()) sharing.push_back(r);
      }
    }
    std::sort(sharing.begin(), sharing.end());
    // CPUs of the host the job may use (or its ranks were given) on which no rank's threads may run.
    cpu_set_t idle;
    CPU_ZERO(&idle);
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if ((CPU_ISSET(c, &given) || CPU_ISSET(c, &rank(h.ranks.front()).usable)) && !CPU_ISSET(c, &used))
        CPU_SET(c, &idle);
    shared_anywhere = shared_anywhere || !sharing.empty();

    // Each rank: the CPUs its threads may run on, and what it was given when that is more.
    std::vector<std::string> each;
    for (std::size_t i = 0; i < h.ranks.size() && i < kRanksShown; ++i) {
      const RankCpus& a = rank(h.ranks[i]);
      each.push_back("rank " + std::to_string(h.ranks[i]) + " on " + cpu_list(cpus_in(a.threads)) +
                     (CPU_EQUAL(&a.given, &a.threads) ? "" : " of " + cpu_list(cpus_in(a.given))));
    }
    if (h.ranks.size() > kRanksShown) each.push_back(std::to_string(h.ranks.size() - kRanksShown) + " more");
    shown.push_back(h.host + ": " + join(each, ", ") + " (" + rank(h.ranks.front()).binding + ")");

    if (check.problem() || sharing.empty() || CPU_COUNT(&idle) == 0) continue;
    // OpenMP narrowed a rank's CPUs (pinned its threads to fewer than it was given) when its
    // threads' set is smaller than its given one: the binding, not the launcher, made them meet.
    const bool narrowed = std::any_of(sharing.begin(), sharing.end(), [&](int r) {
      return !CPU_EQUAL(&rank(r).given, &rank(r).threads);
    });
    check.detail = "on " + h.host + " ranks " + ranks_list(sharing) + " run their threads on the same CPU(s) " +
                   cpu_list(cpus_in(shared)) + ", taking turns, while no rank's threads may run on CPU(s) " +
                   cpu_list(cpus_in(idle)) + " (" + rank(sharing.front()).binding + ")";
    check.fix = narrowed ? "unset OMP_PROC_BIND and OMP_PLACES where the launcher does not give each rank cores of its "
                           "own (Slurm TaskPlugin=task/none, mpirun --bind-to none): OpenMP pins each rank's first "
                           "thread to the first CPU it may use, the same one for every rank; or have the launcher "
                           "bind each rank to its own cores (srun --cpu-bind=cores under task/affinity, mpirun "
                           "--bind-to core)"
                         : "bind each rank to cores of its own (mpirun --bind-to core --map-by core, srun "
                           "--cpu-bind=cores) or leave the ranks unbound (mpirun --bind-to none)";
  }
  if (!check.problem())
    check.detail = join(shown, "; ") + (shared_anywhere ? "; ranks share CPUs, and every CPU the job may use runs "
                                                          "some rank's threads (the kernel spreads them)"
                                                        : "; no two ranks' threads share a CPU");
  return check;
}

CpuCheck probe_sgemm(const World& world, double seconds) {
  const OwnedComm host = host_group(world.comm());
  const int host_rank = group_rank(host.get()), host_size = group_size(host.get());
  // The shape of the widest matmuls of a small GPT-2 (1024 tokens, d_model 768).
  const auto probe = [seconds] { return measure_sgemm_throughput(1024, 768, 768, seconds); };
  std::array<double, 3> rates = {0, 0, static_cast<double>(host_size)};  // alone, together, ranks on the host
  quiet_barrier(world.comm());
  if (host_rank == 0) rates[0] = probe();
  quiet_barrier(world.comm());  // the others sleep while the first rank of each host measures
  broadcast_value(rates[0], 0, host.get());
  barrier(world.comm());
  rates[1] = probe();
  const std::vector<std::array<double, 3>> all = gather_values(rates, 0, world.comm());
  CpuCheck check;
  if (!world.is_root()) return check;

  double lo = 1e300, hi = 0, lo_ratio = 1e300, hi_ratio = 0, alone_lo = 1e300, alone_hi = 0;
  std::vector<int> slow;
  double slow_lo = 1e300, slow_hi = 0;
  for (int r = 0; r < world.size(); ++r) {
    const auto [alone, together, host_ranks] = all[static_cast<std::size_t>(r)];
    const bool shares_host = host_ranks > 1;  // alone: the same measurement twice, its ratio noise
    const double ratio = together / std::max(alone, 1.0);
    lo = std::min(lo, together), hi = std::max(hi, together);
    alone_lo = std::min(alone_lo, alone), alone_hi = std::max(alone_hi, alone);
    lo_ratio = std::min(lo_ratio, ratio), hi_ratio = std::max(hi_ratio, ratio);
    if (shares_host && ratio < kSharedRate) {
      slow.push_back(r);
      slow_lo = std::min(slow_lo, ratio), slow_hi = std::max(slow_hi, ratio);
    }
  }
  const auto range = [](double a, double b, int digits) {
    return a == b || format_fixed(a, digits) == format_fixed(b, digits) ? format_fixed(a, digits)
                                                                        : format_fixed(a, digits) + "-" +
                                                                              format_fixed(b, digits);
  };
  check.detail = "sgemm " + range(alone_lo / 1e9, alone_hi / 1e9, 1) + " GFLOP/s for one rank alone on its host, " +
                 range(lo / 1e9, hi / 1e9, 1) + " per rank with every rank at once (" + range(lo_ratio, hi_ratio, 2) +
                 " of alone)";
  if (!slow.empty()) {
    // Rounded down, so that a rate just under the line does not print as on it ("0.60, below 0.6").
    const auto down = [](double x) { return std::floor(x * 100) / 100; };
    check.detail += ": rank(s) " + ranks_list(slow) + " at " + range(down(slow_lo), down(slow_hi), 2) + ", below " +
                    format_fixed(kSharedRate, 1) +
                    ", share their CPUs: with each other (see cpu sets), as hyperthreads of one core, or with "
                    "another job";
    check.fix = "give each rank cores of its own (see cpu sets), start fewer ranks per host, or find what else runs "
                "on those CPUs (top; squeue -w HOST)";
  }
  return check;
}

}  // namespace st::app
