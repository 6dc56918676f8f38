#pragma once
// The communicators of one job, built from its World: a flat one over all ranks, the node-local
// and cross-node ones, and their two-level composition; `collectives()` is the one the deck
// (parallel.collectives) chose.
#include <memory>
#include <string>

#include "comm/mpi_communicator.hpp"
#include "comm/shm_communicator.hpp"
#include "comm/two_level.hpp"
#include "comm/world.hpp"

namespace st {

class CommStack {
 public:
  // mode: "flat", "two_level" or "auto"; intra_node: "shm" (shared-memory window among the
  // ranks of a host) or "mpi". Throws Error (all ranks) for two_level on a job whose nodes are
  // uneven or whose ranks are not consecutive per node.
  CommStack(const World& world, const std::string& mode, const std::string& intra_node);
  Communicator& collectives() { return two_level_active_ ? static_cast<Communicator&>(*two_level_) : *flat_; }
  bool two_level() const { return two_level_active_; }
  // "two-level: 2 nodes x 2 ranks (emulated)" or "flat ring over 4 ranks".
  std::string description() const;
  // Every byte sent by any of this job's communicators, by level.
  LevelTraffic traffic() const;

 private:
  const World& world_;
  std::unique_ptr<Communicator> flat_, intra_, inter_;
  bool shared_memory_ = false;
  std::unique_ptr<TwoLevelCommunicator> two_level_;
  bool two_level_active_ = false;
};

}  // namespace st
