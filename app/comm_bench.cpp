// shardtrain-comm-bench: collectives benchmark in the style of nccl-tests. For each operation
// and size it times the MPI library's own collective and the project's implementations side by
// side, checks every result, and prints time, algbw and busbw (nccl-tests convention:
// all-reduce busbw = algbw x 2(N-1)/N; reduce-scatter, all-gather, broadcast x (N-1)/N), plus
// busbw as a fraction of one core's memcpy bandwidth measured in the same run, and the copy
// efficiency of the best project implementation: the least memory traffic the operation needs on
// one host (copy_bytes below) per second, as a fraction of the memcpy rate of each rank while
// all ranks copy at once (the yardstick, also measured in the same run).
//   mpirun -n 2 build/shardtrain-comm-bench [--min-bytes 8] [--max-bytes 256M] [--ranks-per-node K] [--rounds R]
// --rounds R repeats the whole sweep R times and prints every round: each round times every
// implementation at every size in turn, so a disturbance of the machine shows as one bad row
// rather than shifting one implementation's mean.
#include <mpi.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/group.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/shard.hpp"
#include "comm/shm_communicator.hpp"
#include "comm/two_level.hpp"
#include "comm/values.hpp"
#include "comm/world.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"

namespace {

using st::Collective;
using st::Communicator;

float value(int rank, std::size_t i) { return static_cast<float>((rank % 7) + static_cast<int>(i % 5)); }

struct Implementation {
  std::string name;
  Communicator* comm;
  bool shared_buffers = false;  // buffers from comm->allocate()
};

// Bytes a memcpy would move for the least memory traffic the operation needs on one host, per
// rank: (bytes read + bytes written) / 2, as a memcpy of X bytes reads X and writes X. S is the
// operation's size (the all-gather's output, the others' buffer), N the ranks.
//   all-gather      every rank writes the whole output from the inputs (read S, write S): S
//   broadcast       every rank but the root copies the root's buffer: S
//   reduce-scatter  a rank reads its part of every input and writes its part (S, S/N): (S + S/N)/2
//   all-reduce      that, then copies the others' parts of the result ((N-1)/N S each way)
double copy_bytes(Collective op, double S, int N) {
  const double part = S / N;
  switch (op) {
    case Collective::all_gather:
    case Collective::broadcast: return S;
    case Collective::reduce_scatter: return (S + part) / 2;
    case Collective::all_reduce: return (S + part) / 2 + (S - part);
  }
  return S;
}

// memcpy bandwidth of one rank while every rank of `together` copies at once (the ranks of a host
// share its memory bandwidth; MPI_COMM_SELF: this rank alone): the best of 5 rounds of 64 MiB
// each. A round lasts from the barrier that starts every rank's copy to the barrier after the
// last one ends, as a collective is timed: when ranks outnumber cores, a rank's own copy can run
// whole inside its time slice while the others wait for a core, and timing only the copy would
// credit each rank with a core to itself.
double memcpy_bandwidth(MPI_Comm together) {
  const std::size_t n = std::size_t{64} << 20;
  std::vector<char> a(n, 1), b(n, 0);
  std::memcpy(b.data(), a.data(), n);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    st::barrier(together);
    st::Stopwatch clock;
    std::memcpy(b.data(), a.data(), n);
    st::barrier(together);
    const double seconds = st::max_over(clock.seconds(), together);
    best = std::max(best, static_cast<double>(n) / seconds);
  }
  return best;
}

// One core's memcpy bandwidth: each rank in turn copies while the others nap; the slowest rank's.
double one_core_memcpy_bandwidth(MPI_Comm comm) {
  const int rank = st::group_rank(comm), size = st::group_size(comm);
  double bandwidth = 0;
  for (int turn = 0; turn < size; ++turn) {
    if (turn == rank) bandwidth = memcpy_bandwidth(MPI_COMM_SELF);
    st::quiet_barrier(comm);  // the others nap while this rank measures alone
  }
  return st::min_over(bandwidth, comm);
}

// Runs `op` on `comm` for a buffer of `bytes`, returns seconds per call (slowest rank) and
// whether every element came out right. With `shared_buffers` the buffer the others read
// (all-reduce and broadcast: the buffer; reduce-scatter, all-gather: the input) comes from
// comm.allocate(), as the trainer's gradient buffers do.
std::pair<double, bool> measure(Collective op, Communicator& comm, bool shared_buffers, std::size_t bytes,
                                int iterations, MPI_Comm world) {
  const int N = comm.size(), rank = comm.rank();
  const std::size_t n = std::max<std::size_t>(1, bytes / sizeof(float));
  std::size_t buffer_count = n, output_count = 0;
  if (op == Collective::reduce_scatter) {
    output_count = st::shard_range(n, N, 0).chunk;
    buffer_count = output_count * static_cast<std::size_t>(N);
  } else if (op == Collective::all_gather) {
    buffer_count = std::max<std::size_t>(1, n / static_cast<std::size_t>(N));
    output_count = buffer_count * static_cast<std::size_t>(N);
  }
  st::Memory memory = shared_buffers ? comm.allocate(buffer_count * sizeof(float))
                                         : st::Memory::private_memory(buffer_count * sizeof(float));
  const std::span<float> buffer = memory.as<float>();
  std::vector<float> output(output_count);
  auto prepare = [&] {
    std::fill(buffer.begin(), buffer.end(), 0.0f);
    const std::size_t real = op == Collective::all_gather ? buffer_count : n;
    for (std::size_t i = 0; i < real; ++i) buffer[i] = value(rank, i);
  };
  auto run = [&] {
    switch (op) {
      case Collective::all_reduce: comm.all_reduce(buffer, st::ReduceOp::sum); break;
      case Collective::reduce_scatter:
        comm.reduce_scatter(std::span<const float>(buffer), std::span<float>(output), st::ReduceOp::sum);
        break;
      case Collective::all_gather: comm.all_gather(std::span<const float>(buffer), std::span<float>(output)); break;
      case Collective::broadcast: comm.broadcast(buffer, 0); break;
    }
  };
  prepare();
  run();  // warm up (pages, window)
  double seconds = 0;
  for (int i = 0; i < iterations; ++i) {
    prepare();
    st::barrier(world);
    st::Stopwatch clock;
    run();
    seconds += clock.seconds();
  }
  seconds = st::max_over(seconds / iterations, world);

  // Check the last result against a locally computed reference.
  bool ok = true;
  float sum_of_values = 0;
  switch (op) {
    case Collective::all_reduce:
      for (std::size_t i = 0; i < n && ok; ++i) {
        sum_of_values = 0;
        for (int r = 0; r < N; ++r) sum_of_values += value(r, i);
        ok = buffer[i] == sum_of_values;
      }
      break;
    case Collective::reduce_scatter: {
      const st::ShardRange mine = st::shard_range(n, N, rank);
      for (std::size_t k = 0; k < mine.real() && ok; ++k) {
        sum_of_values = 0;
        for (int r = 0; r < N; ++r) sum_of_values += value(r, mine.begin + k);
        ok = output[k] == sum_of_values;
      }
      break;
    }
    case Collective::all_gather: {
      const std::size_t c = buffer.size();
      for (std::size_t i = 0; i < output.size() && ok; ++i) ok = output[i] == value(static_cast<int>(i / c), i % c);
      break;
    }
    case Collective::broadcast:
      for (std::size_t i = 0; i < n && ok; ++i) ok = buffer[i] == value(0, i);
      break;
  }
  return {seconds, st::min_over(ok ? 1 : 0, world) == 1};
}

std::size_t parse_size(const std::string& text) {
  std::size_t pos = 0;
  const double number = std::stod(text, &pos);
  const std::string unit = text.substr(pos);
  const double scale = unit.empty() || unit == "B" ? 1 : unit == "K" ? 1024.0 : unit == "M" ? 1048576.0 : unit == "G" ? 1073741824.0 : -1;
  if (scale < 0) throw st::Error("size '" + text + "': use a number with an optional K, M or G", st::ErrorScope::all_ranks);
  return static_cast<std::size_t>(number * scale);
}

int bench(int argc, char** argv) {
  CLI::App cli{"Collectives benchmark: MPI's own collectives against shardtrain's, checked, with algbw/busbw"};
  std::string min_text = "8", max_text = "256M";
  int ranks_per_node = 0, rounds = 1;
  std::vector<std::string> ops = {"all_reduce", "reduce_scatter", "all_gather", "broadcast"};
  cli.add_option("--min-bytes", min_text, "Smallest buffer (8, 4K, 1M, ...)");
  cli.add_option("--max-bytes", max_text, "Largest buffer");
  cli.add_option("--ranks-per-node", ranks_per_node, "Emulate nodes of K consecutive ranks (0: real nodes)");
  cli.add_option("--rounds", rounds, "Repeat the sweep this many times, printing every round")->check(CLI::Range(1, 1000));
  cli.add_option("--ops", ops, "Operations to run")->check(CLI::IsMember({"all_reduce", "reduce_scatter", "all_gather", "broadcast"}));
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return st::world_rank_for_report() == 0 ? cli.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
  }
  st::World world(MPI_COMM_WORLD, ranks_per_node);
  // As in training: the host's cores are shared among its ranks.
  omp_set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world.host_ranks()));
  const bool single_host = world.host_ranks() == world.size();
  st::MpiCommunicator mpi(world.comm(), world.node_count() > 1 ? st::TrafficLevel::inter : st::TrafficLevel::intra);
  st::MpiCommunicator intra(world.node_comm(), st::TrafficLevel::intra), inter(world.cross_comm(), st::TrafficLevel::inter);
  std::unique_ptr<st::ShmCommunicator> shm_world, shm_node;
  std::vector<Implementation> impls = {{"MPI", &mpi}};
  if (single_host) {
    // ST_SHM_SLOT (bytes) tries other piece sizes.
    const char* slot_env = std::getenv("ST_SHM_SLOT");
    shm_world = std::make_unique<st::ShmCommunicator>(
        world.comm(), world.node_count() > 1 ? st::TrafficLevel::inter : st::TrafficLevel::intra,
        slot_env ? std::stoul(slot_env) : std::size_t{1} << 20);
    impls.push_back({"shm", shm_world.get()});
    impls.push_back({"shm-inplace", shm_world.get(), true});
  }
  std::unique_ptr<st::TwoLevelCommunicator> two_mpi, two_shm;
  if (world.node_count() > 1 && world.uniform()) {
    shm_node = std::make_unique<st::ShmCommunicator>(world.node_comm());
    two_shm = std::make_unique<st::TwoLevelCommunicator>(*shm_node, inter);
    two_mpi = std::make_unique<st::TwoLevelCommunicator>(intra, inter);
    impls.push_back({"2lvl-shm", two_shm.get()});
    impls.push_back({"2lvl-inplace", two_shm.get(), true});
    impls.push_back({"2lvl-mpi", two_mpi.get()});
  }
  const double slowest_copy = one_core_memcpy_bandwidth(world.comm());
  const double together_copy = memcpy_bandwidth(world.comm());
  const std::size_t lo = parse_size(min_text), hi = parse_size(max_text);
  const int N = world.size();
  if (world.is_root()) {
    std::printf("# %d ranks, %d node(s) x %d%s; memcpy (one core, 64 MiB) %.2f GB/s; memcpy per rank, all %d "
                "ranks copying at once, %.2f GB/s\n",
                N, world.node_count(), world.local_size(), world.emulated() ? " (emulated)" : "", slowest_copy / 1e9, N,
                together_copy / 1e9);
    std::printf("# time: mean over iterations of the slowest rank; bw in GB/s; busbw/memcpy and copy eff.: best "
                "project implementation; copy eff.: the operation's least memory traffic per rank (in memcpy "
                "bytes) per second over the memcpy rate of a rank with all copying at once\n");
  }
  bool all_correct = true;
  std::vector<std::pair<int, std::string>> sweep;  // (round, operation), in the order they run
  for (int round = 1; round <= rounds; ++round)
    for (const std::string& name : ops) sweep.emplace_back(round, name);
  for (const auto& [round, name] : sweep) {
    const Collective op = name == "all_reduce" ? Collective::all_reduce
                          : name == "reduce_scatter" ? Collective::reduce_scatter
                          : name == "all_gather" ? Collective::all_gather : Collective::broadcast;
    const double bus_factor = op == Collective::all_reduce ? 2.0 * (N - 1) / N : static_cast<double>(N - 1) / N;
    if (world.is_root()) {
      if (rounds > 1) std::printf("\n## %s, round %d of %d\n%12s", name.c_str(), round, rounds, "bytes");
      else std::printf("\n## %s\n%12s", name.c_str(), "bytes");
      for (const auto& impl : impls) std::printf(" | %9s us %8s algbw %8s busbw", impl.name.c_str(), "", "");
      std::printf(" | best/MPI | busbw/memcpy | copy eff. | check\n");
    }
    for (std::size_t bytes = lo; bytes <= hi; bytes *= 2) {
      const int iterations = static_cast<int>(std::clamp<std::size_t>((std::size_t{64} << 20) / bytes, 2, 50));
      std::vector<double> seconds;
      bool ok = true;
      for (const auto& impl : impls) {
        const auto [s, correct] = measure(op, *impl.comm, impl.shared_buffers, bytes, iterations, world.comm());
        seconds.push_back(s);
        ok = ok && correct;
      }
      all_correct = all_correct && ok;
      if (!world.is_root()) continue;
      std::printf("%12zu", bytes);
      double best_project = 1e300;
      for (std::size_t i = 0; i < impls.size(); ++i) {
        const double algbw = static_cast<double>(bytes) / seconds[i] / 1e9;
        std::printf(" | %12.1f %14.3f %14.3f", seconds[i] * 1e6, algbw, algbw * bus_factor);
        if (i > 0) best_project = std::min(best_project, seconds[i]);
      }
      if (impls.size() == 1) best_project = seconds[0];
      const double best_busbw = static_cast<double>(bytes) / best_project * bus_factor;
      const double efficiency = copy_bytes(op, static_cast<double>(bytes), N) / best_project / together_copy;
      std::printf(" | %8.2f | %12.3f | %9.3f | %s\n", seconds[0] / best_project, best_busbw / slowest_copy, efficiency,
                  ok ? "ok" : "WRONG");
      std::fflush(stdout);
    }
  }
  return all_correct ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  st::MpiSession mpi(argc, argv);
  try {
    return bench(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardtrain-comm-bench: error: %s\n", e.what());
    st::abort_job(1);
    return 1;
  }
}
