#pragma once
// Collectives among the ranks of one host through MPI-3 shared-memory windows, bounded by memory
// bandwidth rather than by the MPI library's point-to-point protocol. Two paths:
//   in place   when every rank's buffer lies in memory from allocate() (all ranks map it), each
//              rank sums or copies straight out of the others' buffers: one pass over the data;
//   slots      otherwise each rank publishes its data in its own slot of a staging window, and
//              each sums or copies out of the others' slots: the data is copied twice more.
// The ranks settle which path to take on the collective's first synchronisation.
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
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
  // A region of a shared window: this rank's part, zeroed and first touched here (so its pages
  // sit near this rank), which the others map too. Freed (collectively) with the last handle.
  Memory allocate(std::size_t bytes) override;
  // Open MPI backs shared windows with files in /dev/shm (or its MCA setting
  // shmem_mmap_backing_file_base_dir), a tmpfs that is often small (64 MiB in containers): a
  // window larger than its free space would crash the job on first touch (SIGBUS). So
  // allocate() places a buffer there only if every rank's part fits, together, in that free
  // space and in this limit per part (no limit by default); otherwise the buffer stays in process
  // memory (the collectives then take the slot path) and local rank 0 says so once.
  void limit_shared_bytes(std::size_t bytes_per_rank) { shared_limit_ = bytes_per_rank; }
  // Collectives so far that took the in-place path, and all of them (barriers not counted).
  std::uint64_t in_place_collectives() const { return in_place_; }
  std::uint64_t collectives() const { return collectives_; }

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

  // Memory from allocate(): one window, a part per rank.
  struct Region;
  // Where a rank's buffer lies: in which region (by allocation order, the same on every rank;
  // -1: private memory) and at which byte offset in that rank's part.
  struct Place {
    std::int64_t region = -1;
    std::uint64_t offset = 0;
  };
  Place place_of(const void* data, std::size_t bytes) const;
  Place& place_line(int r) const;  // rank r's entry in the control area
  // The collective's first synchronisation, which also settles its path. Every rank states
  // where its buffer lies. If all buffers lie in shared regions, returns where this process sees
  // each rank's buffer (the in-place path). Otherwise returns nothing, and every rank has run
  // `publish_first` (the slot path's first step) before the synchronisation that ends this call.
  std::vector<char*> begin_collective(const void* data, std::size_t bytes, const std::function<void()>& publish_first);

  // Slot path: copies the parts of a piece of n elements (e bytes each) that the other ranks
  // reduce into the input half of this rank's slot.
  void publish_others_parts(const char* piece, std::size_t n, std::size_t e);
  void all_reduce_in_place(Buffer buffer, ReduceOp op, const std::vector<char*>& buffers);
  void all_reduce_through_slots(Buffer buffer, ReduceOp op);

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
  char* control_ = nullptr;
  std::vector<std::weak_ptr<Region>> regions_;
  TrafficCounters traffic_;
  std::uint64_t in_place_ = 0, collectives_ = 0;
  std::size_t shared_limit_ = SIZE_MAX;
  bool said_private_ = false;
};

}  // namespace st
