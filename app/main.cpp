// shardtrain: a thin entry point. MPI starts here; errors end the job here.
#include <unistd.h>

#include <cstdio>
#include <exception>

#include "app/commands.hpp"
#include "comm/world.hpp"
#include "core/error.hpp"

namespace {

// An error every rank saw (a bad deck) ends the job cleanly with one message from rank 0. An
// error one rank saw alone aborts the whole job, so no other rank waits in a collective.
int report_and_end(const char* what, st::ErrorScope scope) {
  const int rank = st::world_rank_for_report();
  if (scope == st::ErrorScope::all_ranks) {
    if (rank == 0) std::fprintf(stderr, "shardtrain: error: %s\n", what);
    return st::kExitUsage;
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::fprintf(stderr, "[rank %d on %s] shardtrain: error: %s\n", rank, host, what);
  std::fflush(stderr);
  st::abort_job(st::kExitFailure);
  return st::kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    st::MpiSession mpi(argc, argv);
    try {
      return st::app::main_with_mpi(argc, argv);
    } catch (const st::Error& e) {
      return report_and_end(e.what(), e.scope());
    } catch (const std::exception& e) {
      return report_and_end(e.what(), st::ErrorScope::this_rank);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardtrain: cannot start MPI: %s\n", e.what());
    return st::kExitFailure;
  }
}
