#pragma once
// This process's place in MPI_COMM_WORLD, for multi-rank tests.
#include <mpi.h>

namespace st {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

}  // namespace st
