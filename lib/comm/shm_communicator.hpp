#pragma once
// Collectives among the ranks of one host through an MPI-3 shared-memory window: each rank
// publishes its data in its own slot, each sums or copies straight out of the others' slots.
// Bounded by memory bandwidth rather than by the MPI library's point-to-point protocol.
#include <mpi.h>

#include <vector>

#include "comm/communicator.hpp"

namespace st {

class ShmCommunicator final : public Communicator {
 public:
  // comm must consist of ranks that share memory (a node communicator). Each rank's slot holds
  // two halves of slot_bytes (inputs, results); larger buffers go through in pieces.
  // Traffic is counted at `level` (inter when the group spans emulated nodes). 1 MiB slots
  // gave the best bandwidth of 256 KiB to 32 MiB in docs/benchmarks.md.
  explicit ShmCommunicator(MPI_Comm comm, TrafficLevel level = TrafficLevel::intra,
                           std::size_t slot_bytes = std::size_t{1} << 20);
  ~ShmCommunicator() override;
  ShmCommunicator(const ShmCommunicator&) = delete;
  ShmCommunicator& operator=(const ShmCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  LevelTraffic traffic() const override;

 protected:
  void run_all_reduce(Buffer buffer, ReduceOp op) override;
  void run_reduce_scatter(Buffer input, Buffer output, ReduceOp op) override;
  void run_all_gather(Buffer input, Buffer output) override;
  void run_broadcast(Buffer buffer, int root) override;
  void run_barrier() override;

 private:
  // Every rank's writes to its slot become visible to the others (and the reverse): a
  // sense-reversing barrier on a counter in shared memory, far cheaper than MPI_Barrier.
  // Collectives and barrier() use separate counters, so a rank in barrier() never completes
  // another rank's collective by mistake (a mismatch then shows up as a hang, and is diagnosed).
  enum class Counter { collective = 0, barrier = 1 };
  void synchronize(Counter which = Counter::collective);
  // Rank r's slot: input half at 0, result half at slot_bytes_.
  char* slot(int r) const { return slots_[static_cast<std::size_t>(r)]; }

  MPI_Comm comm_;
  TrafficLevel level_;
  MPI_Win window_ = MPI_WIN_NULL;
  MPI_Win control_window_ = MPI_WIN_NULL;
  // Per counter: ranks that reached the current barrier, and a flag that flips when the last
  // arrives (each on its own cache line of rank 0's control area).
  int* arrived_[2] = {nullptr, nullptr};
  int* release_[2] = {nullptr, nullptr};
  int sense_[2] = {0, 0};
  int rank_ = 0, size_ = 1;
  std::size_t slot_bytes_ = 0;
  std::vector<char*> slots_;
  TrafficCounters traffic_;
};

}  // namespace st
