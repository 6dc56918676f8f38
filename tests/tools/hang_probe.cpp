// Makes one rank skip a collective so the job would hang, to check that the watchdog ends it
// with a diagnosis instead. Used by tests/e2e/hang.py.
//   hang_probe TIMEOUT_S SKIP_RANK INTRA_NODE(shm|mpi)
//   hang_probe TIMEOUT_S SKIP_RANK checkpoint: the others wait in a checkpoint's collective file
//     I/O (the watchdog with checkpoint.timeout_s that the Checkpointer uses) for a rank that
//     never arrives.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <optional>
#include <thread>
#include <vector>

#include "comm/stack.hpp"
#include "comm/watchdog.hpp"
#include "comm/world.hpp"

int main(int argc, char** argv) {
  st::MpiSession mpi(argc, argv);
  if (argc != 4) {
    std::fprintf(stderr, "usage: hang_probe TIMEOUT_S SKIP_RANK shm|mpi|checkpoint\n");
    return 2;
  }
  const double timeout = std::stod(argv[1]);
  const int skip = std::stoi(argv[2]);
  if (std::string(argv[3]) == "checkpoint") {
    st::Watchdog watchdog(MPI_COMM_WORLD, timeout, st::kCheckpointLimit);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == skip) {
      std::this_thread::sleep_for(std::chrono::seconds(120));  // a rank stuck before its write
    } else {
      st::Watchdog::Scope write(&watchdog, "write of step 3", 1 << 20, "checkpoint");
      MPI_Barrier(MPI_COMM_WORLD);  // stands in for H5Fclose's collective
    }
    std::printf("rank %d finished: the job did not hang\n", rank);
    return 0;
  }
  const std::optional<st::IntraNode> intra_node = st::choice_from_name<st::IntraNode>(argv[3]);
  if (!intra_node) {
    std::fprintf(stderr, "hang_probe: '%s' is not shm or mpi\n", argv[3]);
    return 2;
  }
  st::World world;
  st::CommStack::Settings settings;
  settings.mode = st::Collectives::flat;
  settings.intra_node = *intra_node;
  settings.timeout_seconds = timeout;
  st::CommStack comms(world, settings);
  std::vector<float> buffer(1 << 18, 1.0f);
  for (int i = 0; i < 5; ++i) {
    if (world.rank() == skip && i == 2) continue;  // the bug under test
    comms.collectives().all_reduce(std::span<float>(buffer), st::ReduceOp::sum);
  }
  if (world.rank() == skip) {
    std::this_thread::sleep_for(std::chrono::seconds(1));  // "computing" while the others wait
    comms.collectives().barrier();
  }
  std::printf("rank %d finished: the job did not hang\n", world.rank());
  return 0;
}
