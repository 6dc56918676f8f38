#pragma once
#include <mpi.h>

#include "comm/communicator.hpp"

namespace st {

// Collectives over one MPI communicator (not owned). Its traffic counts as one level: `intra`
// when the group lives inside a node, `inter` otherwise.
class MpiCommunicator final : public Communicator {
 public:
  enum class Level { intra, inter };
  MpiCommunicator(MPI_Comm comm, Level level);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce(std::span<float> buffer, ReduceOp op) override;
  void all_reduce(std::span<double> buffer, ReduceOp op) override;
  void reduce_scatter(std::span<const float> input, std::span<float> output, ReduceOp op) override;
  void all_gather(std::span<const float> input, std::span<float> output) override;
  void broadcast(std::span<float> buffer, int root) override;
  void barrier() override;
  LevelTraffic traffic() const override;

 private:
  template <class T>
  void all_reduce_impl(std::span<T> buffer, ReduceOp op, MPI_Datatype type);
  std::uint64_t ring_share(std::uint64_t bytes) const;  // bytes x (N-1)/N
  MPI_Comm comm_;
  Level level_;
  int rank_ = 0, size_ = 1;
  TrafficCounters traffic_;
};

}  // namespace st
