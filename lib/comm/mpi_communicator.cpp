#include "comm/mpi_communicator.hpp"

#include <climits>

#include "core/error.hpp"

namespace st {

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(comm) {
  ST_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  ST_CHECK_MPI(MPI_Comm_size(comm_, &size_));
}

template <class T>
void MpiCommunicator::all_reduce_impl(std::span<T> buffer, ReduceOp op, MPI_Datatype type) {
  // MPI counts are int: large buffers go in pieces.
  constexpr std::size_t kPiece = std::size_t{1} << 30;
  for (std::size_t begin = 0; begin < buffer.size(); begin += kPiece) {
    const std::size_t count = std::min(kPiece, buffer.size() - begin);
    ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, buffer.data() + begin, static_cast<int>(count), type, MPI_SUM, comm_));
  }
  if (op == ReduceOp::average && size_ > 1) {
    const T scale = T(1) / static_cast<T>(size_);
    for (auto& x : buffer) x *= scale;
  }
  traffic_.all_reduce += 2 * buffer.size_bytes() * static_cast<std::uint64_t>(size_ - 1) / static_cast<std::uint64_t>(size_);
}

void MpiCommunicator::all_reduce(std::span<float> buffer, ReduceOp op) { all_reduce_impl(buffer, op, MPI_FLOAT); }
void MpiCommunicator::all_reduce(std::span<double> buffer, ReduceOp op) { all_reduce_impl(buffer, op, MPI_DOUBLE); }

void MpiCommunicator::broadcast(std::span<float> buffer, int root) {
  constexpr std::size_t kPiece = std::size_t{1} << 30;
  for (std::size_t begin = 0; begin < buffer.size(); begin += kPiece) {
    const std::size_t count = std::min(kPiece, buffer.size() - begin);
    ST_CHECK_MPI(MPI_Bcast(buffer.data() + begin, static_cast<int>(count), MPI_FLOAT, root, comm_));
  }
  traffic_.broadcast += buffer.size_bytes() * static_cast<std::uint64_t>(size_ - 1) / static_cast<std::uint64_t>(size_);
}

void MpiCommunicator::barrier() { ST_CHECK_MPI(MPI_Barrier(comm_)); }

}  // namespace st
