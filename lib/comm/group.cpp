#include "comm/group.hpp"

#include <chrono>
#include <thread>

#include "comm/mpi_check.hpp"

namespace st {

int group_rank(MPI_Comm comm) {
  int rank = 0;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  return rank;
}

int group_size(MPI_Comm comm) {
  int size = 0;
  ST_CHECK_MPI(MPI_Comm_size(comm, &size));
  return size;
}

namespace {

OwnedComm owned_returning_errors(MPI_Comm comm) {
  OwnedComm owned(comm);
  ST_CHECK_MPI(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  return owned;
}

}  // namespace

OwnedComm split_group(MPI_Comm parent, int color, int key) {
  MPI_Comm split = MPI_COMM_NULL;
  ST_CHECK_MPI(MPI_Comm_split(parent, color, key, &split));
  return owned_returning_errors(split);
}

OwnedComm host_group(MPI_Comm parent) {
  MPI_Comm host = MPI_COMM_NULL;
  ST_CHECK_MPI(MPI_Comm_split_type(parent, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host));
  return owned_returning_errors(host);
}

OwnedComm duplicate_group(MPI_Comm parent) {
  MPI_Comm dup = MPI_COMM_NULL;
  ST_CHECK_MPI(MPI_Comm_dup(parent, &dup));
  return OwnedComm(dup);
}

void barrier(MPI_Comm comm) { ST_CHECK_MPI(MPI_Barrier(comm)); }

void quiet_barrier(MPI_Comm comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  ST_CHECK_MPI(MPI_Ibarrier(comm, &request));
  for (int done = 0;;) {
    ST_CHECK_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void round_trip(std::span<char> bytes, int from, int to, MPI_Comm comm) {
  constexpr int kTag = 7;
  const int count = static_cast<int>(bytes.size());
  const int rank = group_rank(comm);
  if (rank == from) {
    ST_CHECK_MPI(MPI_Send(bytes.data(), count, MPI_CHAR, to, kTag, comm));
    ST_CHECK_MPI(MPI_Recv(bytes.data(), count, MPI_CHAR, to, kTag, comm, MPI_STATUS_IGNORE));
  } else if (rank == to) {
    ST_CHECK_MPI(MPI_Recv(bytes.data(), count, MPI_CHAR, from, kTag, comm, MPI_STATUS_IGNORE));
    ST_CHECK_MPI(MPI_Send(bytes.data(), count, MPI_CHAR, from, kTag, comm));
  }
}

}  // namespace st
