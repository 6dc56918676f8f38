#include "comm/agree.hpp"

#include "core/error.hpp"

namespace st {

void agree_or_throw(MPI_Comm comm, const std::string& local_error) {
  int rank = 0, size = 1;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  ST_CHECK_MPI(MPI_Comm_size(comm, &size));
  int first_failed = local_error.empty() ? size : rank;
  ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, comm));
  if (first_failed == size) return;
  unsigned long long length = local_error.size();
  ST_CHECK_MPI(MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG_LONG, first_failed, comm));
  std::string message = local_error;
  message.resize(length);
  ST_CHECK_MPI(MPI_Bcast(message.data(), static_cast<int>(length), MPI_CHAR, first_failed, comm));
  if (size > 1 && rank != first_failed) message = "rank " + std::to_string(first_failed) + ": " + message;
  throw Error(message, ErrorScope::all_ranks);
}

}  // namespace st
