#pragma once
// Collectives on small values: a flag, a count, a time, a name, one record per rank. These are
// the agreements a job makes around the training step (start-up, checks, measurements); each is
// one checked MPI call here, so no caller outside comm/ calls MPI itself. The training step's
// buffers go through Communicator (comm/communicator.hpp) instead.
#include <mpi.h>

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "comm/group.hpp"

namespace st {

// The MPI type of an element type these helpers reduce or broadcast.
template <class T>
MPI_Datatype mpi_type_of() {
  if constexpr (std::is_same_v<T, int>) return MPI_INT;
  else if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::uint32_t>) return MPI_UINT32_T;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return MPI_UINT64_T;
  else if constexpr (std::is_same_v<T, unsigned long long>) return MPI_UNSIGNED_LONG_LONG;
  else static_assert(!sizeof(T), "no MPI type for this element type");
}

enum class Reduction { min, max, sum };

namespace detail {
void all_reduce_in_place(void* values, std::size_t count, MPI_Datatype type, Reduction op, MPI_Comm comm);
void exclusive_sum(const void* value, void* before, MPI_Datatype type, MPI_Comm comm);
void broadcast_in_place(void* values, std::size_t count, MPI_Datatype type, int root, MPI_Comm comm);
void all_gather_bytes(const void* mine, std::size_t bytes, void* all, MPI_Comm comm);
void gather_bytes(const void* mine, std::size_t bytes, void* all, int root, MPI_Comm comm);
// Rank r's `counts[r]` elements at `offsets[r]` of `all`, on every rank.
void all_gather_varying(const void* mine, int count, MPI_Datatype type, void* all, const std::vector<int>& counts,
                        const std::vector<int>& offsets, MPI_Comm comm);
}  // namespace detail

// The smallest, largest or sum of one value over the ranks of `comm`, on every rank. Collective.
template <class T>
T min_over(T value, MPI_Comm comm) {
  detail::all_reduce_in_place(&value, 1, mpi_type_of<T>(), Reduction::min, comm);
  return value;
}
template <class T>
T max_over(T value, MPI_Comm comm) {
  detail::all_reduce_in_place(&value, 1, mpi_type_of<T>(), Reduction::max, comm);
  return value;
}
template <class T>
T sum_over(T value, MPI_Comm comm) {
  detail::all_reduce_in_place(&value, 1, mpi_type_of<T>(), Reduction::sum, comm);
  return value;
}
// The same element by element, in place over `values` (same length on every rank).
template <class T>
void reduce_each(std::span<T> values, Reduction op, MPI_Comm comm) {
  detail::all_reduce_in_place(values.data(), values.size(), mpi_type_of<T>(), op, comm);
}

// The sum of `value` over the ranks before this one (0 on the first rank). Collective.
template <class T>
T sum_before(T value, MPI_Comm comm) {
  T before{};
  detail::exclusive_sum(&value, &before, mpi_type_of<T>(), comm);
  return group_rank(comm) == 0 ? T{} : before;  // MPI_Exscan leaves the first rank's result undefined
}

// The root's value on every rank. Collective.
template <class T>
void broadcast_value(T& value, int root, MPI_Comm comm) {
  detail::broadcast_in_place(&value, 1, mpi_type_of<T>(), root, comm);
}
// The root's text or list on every rank (resized to fit). Collective.
void broadcast(std::string& text, int root, MPI_Comm comm);
void broadcast(std::vector<std::uint64_t>& values, int root, MPI_Comm comm);

// Every rank's record (plain bytes: the ranks run the same build), in rank order, on every rank
// (all_gather_values) or on `root` alone (gather_values; empty on the others). Collective.
template <class T>
std::vector<T> all_gather_values(const T& mine, MPI_Comm comm);
template <class T>
std::vector<T> gather_values(const T& mine, int root, MPI_Comm comm);
// Every rank's `text`, in rank order, on every rank. Collective.
std::vector<std::string> all_gather_text(const std::string& text, MPI_Comm comm);
// Whether two ranks of `comm` on one host gave the same `text` (a device's identity, say).
// Collective; the same answer on every rank.
bool some_host_repeats(const std::string& text, MPI_Comm comm);
// Every rank's elements one after the other, in rank order, on every rank (the total must fit an
// int). Collective.
template <class T>
std::vector<T> all_gather_joined(std::span<const T> mine, MPI_Comm comm);

template <class T>
std::vector<T> all_gather_values(const T& mine, MPI_Comm comm) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::vector<T> all(static_cast<std::size_t>(group_size(comm)));
  detail::all_gather_bytes(&mine, sizeof(T), all.data(), comm);
  return all;
}

template <class T>
std::vector<T> gather_values(const T& mine, int root, MPI_Comm comm) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::vector<T> all(group_rank(comm) == root ? static_cast<std::size_t>(group_size(comm)) : 0);
  detail::gather_bytes(&mine, sizeof(T), all.data(), root, comm);
  return all;
}

template <class T>
std::vector<T> all_gather_joined(std::span<const T> mine, MPI_Comm comm) {
  const int count = static_cast<int>(mine.size());
  const std::vector<int> counts = all_gather_values(count, comm);
  std::vector<int> offsets(counts.size());
  std::size_t total = counts.empty() ? 0 : static_cast<std::size_t>(counts[0]);
  for (std::size_t r = 1; r < counts.size(); ++r) {
    offsets[r] = offsets[r - 1] + counts[r - 1];
    total += static_cast<std::size_t>(counts[r]);
  }
  std::vector<T> all(total);
  detail::all_gather_varying(mine.data(), count, mpi_type_of<T>(), all.data(), counts, offsets, comm);
  return all;
}

}  // namespace st
