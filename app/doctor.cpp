// `shardtrain doctor`: checks the setup before a long run, one line per check with its verdict
// and, for a problem, the fix. Run it the way the training will run (mpirun -n N, srun).
#include <cblas.h>
#include <mpi.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "app/commands.hpp"
#include "app/doctor_cpus.hpp"
#include "app/doctor_nodes.hpp"
#include "comm/group.hpp"
#include "comm/mpi_library.hpp"
#include "comm/values.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "core/timer.hpp"
#include "exec/threads.hpp"
#include "plan/machine.hpp"
#include "topology/detect.hpp"
#include "train/blas_kernel.hpp"

namespace st::app {
namespace {

enum class Verdict { ok, warn, fail };

struct Report {
  std::vector<std::string> lines;
  int problems = 0, failures = 0;
  void add(Verdict v, const std::string& check, const std::string& detail, const std::string& fix = "") {
    char head[64];
    std::snprintf(head, sizeof head, "%-5s %-13s ", v == Verdict::ok ? "OK" : v == Verdict::warn ? "WARN" : "FAIL",
                  check.c_str());
    lines.push_back(head + detail + (fix.empty() ? "" : " -- fix: " + fix));
    problems += v != Verdict::ok;
    failures += v == Verdict::fail;
  }
};

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

int env_int(const char* name) {
  const std::string v = env(name);
  if (v.empty()) return -1;
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  return *end == '\0' ? static_cast<int>(x) : -1;
}

// The largest and smallest of a value over the ranks.
std::pair<double, double> min_max(double x, MPI_Comm comm) { return {min_over(x, comm), max_over(x, comm)}; }

std::string fixed(double x, int digits = 1) { return format_fixed(x, digits); }

}  // namespace

int doctor_command(World& world) {
  Report r;
  const int size = world.size();

  // MPI library and standard.
  const MpiLibrary mpi = describe_mpi_library();
  r.add(mpi.threaded ? Verdict::ok : Verdict::warn,
        "mpi", mpi.name + ", MPI " + std::to_string(mpi.major) + "." + std::to_string(mpi.minor) + ", thread level " +
                   std::to_string(mpi.thread_level),
        mpi.threaded ? "" : "an MPI library built with thread support (the progress thread needs it)");

  // Launcher and world size: what the launcher promised against what MPI started.
  const int slurm_tasks = env_int("SLURM_NTASKS");
  const int ompi_size = env_int("OMPI_COMM_WORLD_SIZE");
  // srun sets SLURM_STEP_ID for its tasks (a batch script has none); a process started on its own
  // has PMIX_RANK too (Open MPI's singleton), so PMIx alone does not mean srun.
  std::string launcher = ompi_size > 0                 ? "mpirun (Open MPI)"
                         : env("SLURM_STEP_ID").empty() ? "none (started on its own: one rank)"
                         : env("PMIX_RANK").empty()     ? "srun (without PMIx)"
                                                        : "srun --mpi=pmix";
  if (!env("SLURM_JOB_ID").empty()) launcher += ", inside Slurm job " + env("SLURM_JOB_ID");
  if (slurm_tasks > 0 && slurm_tasks != size)
    r.add(Verdict::fail, "world size",
          "wrong world size: SLURM_NTASKS = " + std::to_string(slurm_tasks) + " but MPI started " + std::to_string(size) +
              " rank(s) (launcher: " + launcher + ")",
          "launch with `srun --mpi=pmix` (or `mpirun -n " + std::to_string(slurm_tasks) +
              "`) so every task of the allocation is a rank");
  else if (ompi_size > 0 && ompi_size != size)
    r.add(Verdict::fail, "world size",
          "wrong world size: OMPI_COMM_WORLD_SIZE = " + std::to_string(ompi_size) + " but MPI_COMM_WORLD has " +
              std::to_string(size) + " rank(s)",
          "run the executable directly under mpirun, not through a wrapper that starts its own MPI");
  else
    r.add(Verdict::ok, "world size",
          std::to_string(size) + " rank(s) on " + std::to_string(world.node_count()) + " node(s) (launcher: " + launcher +
              (slurm_tasks > 0 ? ", SLURM_NTASKS = " + std::to_string(slurm_tasks) : std::string()) + ")");

  // Nodes (their hosts and ranks) and what carries bytes between them.
  const NodeReport nodes = describe_nodes(world);
  r.add(nodes.nodes_ok ? Verdict::ok : Verdict::warn, "nodes", nodes.nodes,
        nodes.nodes_ok ? "" : "place the same number of ranks on every node, in order (mpirun --map-by ppr:K:node)");
  r.add(Verdict::ok, "transport", nodes.transport);

  // Ranks per host against its cores.
  Topology host;
  fill_host_counts(host);
  const int allowed = static_cast<int>(given_cpus().size());  // what the launcher gave, OpenMP's binding aside
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  double over = static_cast<double>(world.host_ranks()) / host.cores;
  over = min_max(over, world.comm()).second;
  const std::string per_host = std::to_string(world.host_ranks()) + " rank(s) on this host's " +
                               std::to_string(host.cores) + " core(s) (" + std::to_string(allowed) +
                               " CPUs this rank may use)";
  if (over > 1)
    r.add(Verdict::warn, "ranks/cores", per_host + ": more ranks than cores, each waits for the others",
          "start at most one rank per core (mpirun -n " + std::to_string(host.cores) + " per host)");
  else
    r.add(Verdict::ok, "ranks/cores", per_host);

  // Threads: what the run will use, and any setting that would oversubscribe the cores.
  const int threads = choose_thread_count(0, world.host_ranks());
  const int omp = env_int("OMP_NUM_THREADS");
  const std::string thread_line = "the run uses " + std::to_string(threads) + " thread(s) per rank (OMP_NUM_THREADS " +
                                  (omp > 0 ? std::to_string(omp) : std::string("unset")) + ", OPENBLAS_NUM_THREADS " +
                                  (env("OPENBLAS_NUM_THREADS").empty() ? "unset" : env("OPENBLAS_NUM_THREADS")) + ")";
  if (omp > 0 && omp * world.host_ranks() > hardware)
    r.add(Verdict::warn, "threads",
          thread_line + "; OMP_NUM_THREADS x ranks = " + std::to_string(omp * world.host_ranks()) + " exceeds the " +
              std::to_string(hardware) + " CPUs (run.threads = 0 ignores it only when the deck sets no count)",
          "unset OMP_NUM_THREADS or set it to " + std::to_string(std::max(1, hardware / world.host_ranks())));
  else
    r.add(Verdict::ok, "threads", thread_line);

  // Where each rank's threads run: ranks taking turns on shared CPUs while others sit idle.
  const CpuCheck sets = check_cpu_sets(world, threads);
  if (world.is_root()) r.add(sets.problem() ? Verdict::warn : Verdict::ok, "cpu sets", sets.detail, sets.fix);

  // BLAS: the kernel in use (the build's baseline target is not it).
  const std::string core = openblas_get_corename();
  const std::string coretype = env("OPENBLAS_CORETYPE");
  const std::string mismatch = blas_kernel_mismatch(world.comm());
  const std::string blas_line =
      "OpenBLAS kernel " + core + (coretype.empty() ? "" : " (OPENBLAS_CORETYPE = " + coretype + ")") + "; " +
      blas_description();
  if (mismatch.empty()) r.add(Verdict::ok, "blas", blas_line);
  else r.add(Verdict::warn, "blas", mismatch, "export OPENBLAS_CORETYPE to every rank, the same value");

  // Topology (one rank looks; the others wait).
  std::string topo_line;
  if (world.is_root()) {
    bool detected = false;
    try {
      const DetectedTopology d = detect_topology();
      const TopologySummary s = summarize(d.topology);
      topo_line = node_class_name(s.node_class) + " (" + d.topology.source + ")";
      if (d.topology.gpu_count() > 0) topo_line += ", " + std::to_string(d.topology.gpu_count()) + " GPU(s)";
      else topo_line += ", " + std::to_string(d.topology.sockets) + " socket(s), " + std::to_string(d.topology.numa_nodes) +
                        " NUMA node(s)";
      detected = true;
    } catch (const Error& e) {
      topo_line = std::string("cannot detect: ") + e.what();
    }
    r.add(detected ? Verdict::ok : Verdict::warn, "topology", topo_line,
          detected ? "" : "install hwloc (libhwloc15), or give `shardtrain topo --topology FILE`");
  }

  // Free memory per rank and disk space where the run writes.
  std::string source;
  const double available = host_available_bytes(&source);
  const auto memory = min_max(available / world.host_ranks(), world.comm());
  r.add(memory.first < 1024.0 * 1024 * 1024 ? Verdict::warn : Verdict::ok, "memory",
        format_bytes(memory.first) + " per rank (" + source + " shared by the host's ranks; least of the hosts)",
        memory.first < 1024.0 * 1024 * 1024 ? "fewer ranks per host, or check what else uses the memory" : "");
  struct statvfs fs {};
  for (const char* where : {".", "/dev/shm"}) {
    if (statvfs(where, &fs) != 0) {
      r.add(Verdict::warn, "disk", std::string("cannot statvfs '") + where + "'", "check that the directory exists");
      continue;
    }
    const double free_bytes = static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize);
    const bool low = free_bytes < 1024.0 * 1024 * 1024;
    r.add(low ? Verdict::warn : Verdict::ok, "disk", format_bytes(free_bytes) + " free in " + where,
          low ? std::string("free space in ") + where + " (checkpoints; shared-memory buffers live in /dev/shm)" : "");
  }

  // A short probe: each rank's sgemm rate with every rank busy against one rank alone on its
  // host, memory copy rate, and the bandwidth of an all-reduce over the world.
  apply_thread_count(threads);
  const CpuCheck sgemm = probe_sgemm(world, 0.2);
  const auto copy = min_max(measure_copy_gbps(0.1), world.comm());
  std::string probe = sgemm.detail + "; memcpy " + fixed(copy.first) + "-" + fixed(copy.second) + " GB/s per rank";
  if (size > 1) {
    std::vector<float> buffer(4u << 20, 1.0f);  // 16 MiB
    reduce_each(std::span<float>(buffer), Reduction::sum, world.comm());
    barrier(world.comm());
    Stopwatch clock;
    const int runs = 3;
    for (int i = 0; i < runs; ++i)
      reduce_each(std::span<float>(buffer), Reduction::sum, world.comm());
    const double t = min_max(clock.seconds() / runs, world.comm()).second;
    const double bytes = static_cast<double>(buffer.size()) * sizeof(float);
    // nccl-tests' bus bandwidth: algbw x 2 (N-1)/N.
    probe += ", all-reduce of 16 MiB " + fixed(bytes / t / 1e9 * 2.0 * (size - 1) / size, 2) + " GB/s bus bandwidth";
  }
  if (world.is_root()) r.add(sgemm.problem() ? Verdict::warn : Verdict::ok, "probe", probe, sgemm.fix);

  if (world.is_root()) {
    for (const auto& line : r.lines) std::cout << line << "\n";
    std::cout << "doctor: " << r.lines.size() << " checks, " << r.problems << " problem(s)"
              << (r.failures ? ", " + std::to_string(r.failures) + " that stop a run" : std::string()) << "\n";
  }
  return r.failures ? kExitFailure : kExitOk;
}

}  // namespace st::app
