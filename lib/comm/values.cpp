#include "comm/values.hpp"

#include <algorithm>
#include <climits>

#include "comm/group.hpp"
#include "comm/mpi_check.hpp"

namespace st {
namespace detail {
namespace {

MPI_Op mpi_op(Reduction op) { return op == Reduction::min ? MPI_MIN : op == Reduction::max ? MPI_MAX : MPI_SUM; }

int mpi_count(std::size_t count) {
  ST_REQUIRE(count <= static_cast<std::size_t>(INT_MAX), "a collective of more than 2^31 - 1 elements");
  return static_cast<int>(count);
}

}  // namespace

void all_reduce_in_place(void* values, std::size_t count, MPI_Datatype type, Reduction op, MPI_Comm comm) {
  ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, values, mpi_count(count), type, mpi_op(op), comm));
}

void exclusive_sum(const void* value, void* before, MPI_Datatype type, MPI_Comm comm) {
  ST_CHECK_MPI(MPI_Exscan(value, before, 1, type, MPI_SUM, comm));
}

void broadcast_in_place(void* values, std::size_t count, MPI_Datatype type, int root, MPI_Comm comm) {
  ST_CHECK_MPI(MPI_Bcast(values, mpi_count(count), type, root, comm));
}

void all_gather_bytes(const void* mine, std::size_t bytes, void* all, MPI_Comm comm) {
  const int n = mpi_count(bytes);
  ST_CHECK_MPI(MPI_Allgather(mine, n, MPI_BYTE, all, n, MPI_BYTE, comm));
}

void gather_bytes(const void* mine, std::size_t bytes, void* all, int root, MPI_Comm comm) {
  const int n = mpi_count(bytes);
  ST_CHECK_MPI(MPI_Gather(mine, n, MPI_BYTE, all, n, MPI_BYTE, root, comm));
}

void all_gather_varying(const void* mine, int count, MPI_Datatype type, void* all, const std::vector<int>& counts,
                        const std::vector<int>& offsets, MPI_Comm comm) {
  ST_CHECK_MPI(MPI_Allgatherv(mine, count, type, all, counts.data(), offsets.data(), type, comm));
}

}  // namespace detail

void broadcast(std::string& text, int root, MPI_Comm comm) {
  unsigned long long length = text.size();
  broadcast_value(length, root, comm);
  text.resize(length);
  if (length > 0) detail::broadcast_in_place(text.data(), length, MPI_CHAR, root, comm);
}

void broadcast(std::vector<std::uint64_t>& values, int root, MPI_Comm comm) {
  unsigned long long length = values.size();
  broadcast_value(length, root, comm);
  values.resize(length);
  if (length > 0) detail::broadcast_in_place(values.data(), length, MPI_UINT64_T, root, comm);
}

bool some_host_repeats(const std::string& text, MPI_Comm comm) {
  const OwnedComm host = host_group(comm);
  std::vector<std::string> all = all_gather_text(text, host.get());
  std::sort(all.begin(), all.end());
  const int repeats = std::adjacent_find(all.begin(), all.end()) != all.end() ? 1 : 0;
  return max_over(repeats, comm) != 0;
}

std::vector<std::string> all_gather_text(const std::string& text, MPI_Comm comm) {
  const int length = static_cast<int>(text.size());
  const std::vector<int> lengths = all_gather_values(length, comm);
  std::vector<int> offsets(lengths.size());
  int total = 0;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    offsets[r] = total;
    total += lengths[r];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  detail::all_gather_varying(text.data(), length, MPI_CHAR, all.data(), lengths, offsets, comm);
  std::vector<std::string> out;
  for (std::size_t r = 0; r < lengths.size(); ++r)
    out.push_back(all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(lengths[r])));
  return out;
}

}  // namespace st
