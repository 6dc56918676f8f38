// GoogleTest main for multi-rank tests: MPI around the test run, one result for the job (a test
// fails if it fails on any rank), output from rank 0 only.
#include <gtest/gtest.h>
#include <mpi.h>

#include "core/error.hpp"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  st::set_rank_for_messages(rank);  // as MpiSession does: errors name their rank
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  st::set_rank_for_messages(-1);
  MPI_Finalize();
  return failed;
}
