#pragma once
#include <mpi.h>

#include "comm/communicator.hpp"

namespace st {

// Collectives over one MPI communicator (not owned). Traffic is counted as a ring algorithm
// moves it: all-reduce sends 2 (N-1)/N of the buffer per rank, broadcast (N-1)/N.
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce(std::span<float> buffer, ReduceOp op) override;
  void all_reduce(std::span<double> buffer, ReduceOp op) override;
  void broadcast(std::span<float> buffer, int root) override;
  void barrier() override;
  const TrafficCounters& traffic() const override { return traffic_; }

 private:
  template <class T>
  void all_reduce_impl(std::span<T> buffer, ReduceOp op, MPI_Datatype type);
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  TrafficCounters traffic_;
};

}  // namespace st
