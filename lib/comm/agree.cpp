#include "comm/agree.hpp"

#include "comm/values.hpp"

namespace st {

void agree_or_throw(MPI_Comm comm, const std::string& local_error, bool name_rank) {
  const int rank = group_rank(comm), size = group_size(comm);
  const int first_failed = min_over(local_error.empty() ? size : rank, comm);
  if (first_failed == size) return;
  std::string message = local_error;
  broadcast(message, first_failed, comm);
  if (name_rank && size > 1 && rank != first_failed) message = "rank " + std::to_string(first_failed) + ": " + message;
  throw Error(message, ErrorScope::all_ranks);
}

}  // namespace st
