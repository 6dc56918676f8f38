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

std::vector<std::string> all_gather_text(const std::string& text, MPI_Comm comm) {
  int size = 0;
  ST_CHECK_MPI(MPI_Comm_size(comm, &size));
  const int length = static_cast<int>(text.size());
  std::vector<int> lengths(static_cast<std::size_t>(size)), offsets(lengths.size());
  ST_CHECK_MPI(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm));
  int total = 0;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    offsets[r] = total;
    total += lengths[r];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  ST_CHECK_MPI(MPI_Allgatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, comm));
  std::vector<std::string> out;
  for (std::size_t r = 0; r < lengths.size(); ++r)
    out.push_back(all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(lengths[r])));
  return out;
}

}  // namespace st
