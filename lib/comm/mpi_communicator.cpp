#include "comm/mpi_communicator.hpp"

#include <algorithm>
#include <climits>

#include "core/error.hpp"

namespace st {

std::string_view collective_name(Collective c) {
  switch (c) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_gather: return "all_gather";
    case Collective::broadcast: return "broadcast";
  }
  return "?";
}

namespace {
// MPI counts are int: larger buffers go in pieces of this many elements.
constexpr std::size_t kPiece = std::size_t{1} << 30;

template <class T>
void scale(std::span<T> buffer, int size) {
  if (size <= 1) return;
  const T factor = T(1) / static_cast<T>(size);
  for (auto& x : buffer) x *= factor;
}
}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, Level level) : comm_(comm), level_(level) {
  ST_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  ST_CHECK_MPI(MPI_Comm_size(comm_, &size_));
}

std::uint64_t MpiCommunicator::ring_share(std::uint64_t bytes) const {
  return bytes * static_cast<std::uint64_t>(size_ - 1) / static_cast<std::uint64_t>(size_);
}

template <class T>
void MpiCommunicator::all_reduce_impl(std::span<T> buffer, ReduceOp op, MPI_Datatype type) {
  for (std::size_t begin = 0; begin < buffer.size(); begin += kPiece) {
    const std::size_t count = std::min(kPiece, buffer.size() - begin);
    ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, buffer.data() + begin, static_cast<int>(count), type, MPI_SUM, comm_));
  }
  if (op == ReduceOp::average) scale(buffer, size_);
  traffic_.add(Collective::all_reduce, 2 * ring_share(buffer.size_bytes()));
}

void MpiCommunicator::all_reduce(std::span<float> buffer, ReduceOp op) { all_reduce_impl(buffer, op, MPI_FLOAT); }
void MpiCommunicator::all_reduce(std::span<double> buffer, ReduceOp op) { all_reduce_impl(buffer, op, MPI_DOUBLE); }

void MpiCommunicator::reduce_scatter(std::span<const float> input, std::span<float> output, ReduceOp op) {
  ST_REQUIRE(input.size() == output.size() * static_cast<std::size_t>(size_),
             "reduce_scatter: input must hold size() x output elements (pad with shard_range)");
  ST_REQUIRE(output.size() <= static_cast<std::size_t>(INT_MAX), "reduce_scatter: chunk exceeds an MPI count");
  ST_CHECK_MPI(MPI_Reduce_scatter_block(input.data(), output.data(), static_cast<int>(output.size()), MPI_FLOAT, MPI_SUM,
                                        comm_));
  if (op == ReduceOp::average) scale(output, size_);
  traffic_.add(Collective::reduce_scatter, ring_share(input.size_bytes()));
}

void MpiCommunicator::all_gather(std::span<const float> input, std::span<float> output) {
  ST_REQUIRE(output.size() == input.size() * static_cast<std::size_t>(size_),
             "all_gather: output must hold size() x input elements");
  ST_REQUIRE(input.size() <= static_cast<std::size_t>(INT_MAX), "all_gather: chunk exceeds an MPI count");
  ST_CHECK_MPI(MPI_Allgather(input.data(), static_cast<int>(input.size()), MPI_FLOAT, output.data(),
                             static_cast<int>(input.size()), MPI_FLOAT, comm_));
  traffic_.add(Collective::all_gather, ring_share(output.size_bytes()));
}

void MpiCommunicator::broadcast(std::span<float> buffer, int root) {
  for (std::size_t begin = 0; begin < buffer.size(); begin += kPiece) {
    const std::size_t count = std::min(kPiece, buffer.size() - begin);
    ST_CHECK_MPI(MPI_Bcast(buffer.data() + begin, static_cast<int>(count), MPI_FLOAT, root, comm_));
  }
  traffic_.add(Collective::broadcast, ring_share(buffer.size_bytes()));
}

void MpiCommunicator::barrier() { ST_CHECK_MPI(MPI_Barrier(comm_)); }

LevelTraffic MpiCommunicator::traffic() const {
  LevelTraffic t;
  (level_ == Level::intra ? t.intra : t.inter) = traffic_;
  return t;
}

}  // namespace st
