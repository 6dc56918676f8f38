#pragma once
// Two-level collectives (as in Horovod's hierarchical all-reduce): work inside the node first,
// send across nodes only what must cross, then finish inside the node. With L ranks per node
// and M nodes an all-reduce of B bytes moves 2 (L-1)/L B inside the node and 2 (M-1)/M B / L
// across it per rank, against 2 (N-1)/N B for a flat ring over N = L M ranks.
#include <vector>

#include "comm/communicator.hpp"

namespace st {

class TwoLevelCommunicator final : public Communicator {
 public:
  // intra: this rank's node (local rank l of L); inter: the ranks with local rank l, one per
  // node, ordered by node (rank n of M). World rank must be n L + l (World::uniform()).
  TwoLevelCommunicator(Communicator& intra, Communicator& inter);

  int rank() const override { return inter_.rank() * intra_.size() + intra_.rank(); }
  int size() const override { return intra_.size() * inter_.size(); }
  LevelTraffic traffic() const override;
  // From the node's communicator: a buffer the node-level steps can work on in place.
  Memory allocate(std::size_t bytes) override { return intra_.allocate(bytes); }

 protected:
  void run_all_reduce(Buffer buffer, ReduceOp op) override;
  void run_reduce_scatter(Buffer input, Buffer output, ReduceOp op) override;
  void run_all_gather(Buffer input, Buffer output) override;
  void run_broadcast(Buffer buffer, int root) override;
  void run_barrier() override;

 private:
  Communicator& intra_;
  Communicator& inter_;
  // Scratch from the node communicator (device memory on GPUs), kept between calls and grown
  // when a call needs more.
  Memory padded_, chunk_, permuted_;
  std::byte* scratch(Memory& memory, std::size_t bytes);
  // The all-reduce's node slice, from intra_.allocate() (grown as needed, the same on every
  // rank of the node): the node-level all-gather then reads it in place.
  Memory slice_;
};

}  // namespace st
