#include "comm/agree.hpp"

#include "core/error.hpp"

namespace st {

void agree_or_throw(MPI_Comm comm, const std::string& local_error, bool name_rank) {
  int rank = 0, size = 1;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  ST_CHECK_MPI(MPI_Comm_size(comm, &size));
  int first_failed = local_error.empty() ? size : rank;
  ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, comm));
  if (first_failed == size) return;
  std::string message = local_error;
  broadcast(message, first_failed, comm);
  if (name_rank && size > 1 && rank != first_failed) message = "rank " + std::to_string(first_failed) + ": " + message;
  throw Error(message, ErrorScope::all_ranks);
}

void broadcast(std::string& text, int root, MPI_Comm comm) {
  unsigned long long length = text.size();
  ST_CHECK_MPI(MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG_LONG, root, comm));
  text.resize(length);
  if (length > 0) ST_CHECK_MPI(MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, root, comm));
}

void broadcast(std::vector<std::uint64_t>& values, int root, MPI_Comm comm) {
  unsigned long long length = values.size();
  ST_CHECK_MPI(MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG_LONG, root, comm));
  values.resize(length);
  if (length > 0) ST_CHECK_MPI(MPI_Bcast(values.data(), static_cast<int>(length), MPI_UINT64_T, root, comm));
}

}  // namespace st
