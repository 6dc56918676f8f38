#pragma once
#include <mpi.h>

#include "comm/communicator.hpp"

namespace st {

// Collectives over one MPI communicator (not owned). Its traffic counts as one level: `intra`
// when the group lives inside a node, `inter` otherwise. bf16 travels as 16-bit words and is
// summed by a user-defined MPI operation that adds in fp32.
//
// How a call waits: `blocking` calls MPI's blocking collective (MPI polls at full speed);
// `polling` starts the non-blocking one and polls it with naps in between, so a collective
// waiting for partners that are still computing does not take the core from compute (the
// trainer's collectives run on a progress thread, and ranks may outnumber cores).
enum class MpiWait { blocking, polling };

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, TrafficLevel level, MpiWait wait = MpiWait::blocking);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  LevelTraffic traffic() const override;
  // MPI's type for a buffer's elements (bf16 as 16-bit integers: MPI has no bf16).
  static MPI_Datatype mpi_type(DataType t);

 protected:
  void run_all_reduce(Buffer buffer, ReduceOp op) override;
  void run_reduce_scatter(Buffer input, Buffer output, ReduceOp op) override;
  void run_all_gather(Buffer input, Buffer output) override;
  void run_broadcast(Buffer buffer, int root) override;
  void run_barrier() override;

 private:
  MPI_Op sum_op(DataType t) const { return t == DataType::bf16 ? bf16_sum_ : MPI_SUM; }
  MPI_Comm comm_;
  MpiWait wait_;
  TrafficLevel level_;
  int rank_ = 0, size_ = 1;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  TrafficCounters traffic_;
};

}  // namespace st
