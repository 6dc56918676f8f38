#pragma once
// The communicators of one job, built from its World: a flat one over all ranks, the node-local
// and cross-node ones, and their two-level composition; `collectives()` is the one the deck
// (parallel.collectives) chose.
#include <functional>
#include <memory>
#include <string>

#include "core/choices.hpp"
#include "comm/agreements.hpp"
#include "comm/async.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/shm_communicator.hpp"
#include "comm/throttled.hpp"
#include "comm/two_level.hpp"
#include "comm/watched.hpp"
#include "comm/world.hpp"

namespace st {

class CommStack {
 public:
  // mode: parallel.collectives; intra_node: shm (a shared-memory window among the
  // ranks of a host) or mpi. Throws Error (all ranks) for two_level on a job whose nodes are
  // uneven or whose ranks are not consecutive per node.
  struct Settings {
    Collectives mode = Collectives::automatic;
    IntraNode intra_node = IntraNode::shm;
    double timeout_seconds = 0;       // > 0: watch every collective for hangs (comm/watchdog.hpp)
    double inter_gbps = 0;            // > 0: emulate an inter-node link of this many GB/s ...
    double inter_latency_us = 0;      // ... and this latency per call
    // A GPU run's buffers are device memory: the backend for a group of ranks on their GPUs
    // (NCCL), and the one that carries a host backend's collectives on device buffers (MPI
    // across nodes through pinned host memory). Unset: host buffers, shared memory or MPI.
    // device_peers gets timeout_seconds: how long its own wait may last (0: no limit).
    std::function<std::unique_ptr<Communicator>(MPI_Comm, TrafficLevel, double)> device_peers;
    std::function<std::unique_ptr<Communicator>(Communicator& host)> device_staging;
  };
  CommStack(const World& world, const Settings& settings);
  const World& world() const { return world_; }
  // Blocking and non-blocking collectives, watched for hangs.
  Communicator& collectives() { return *async_; }
  // "two-level (shared memory in the node, MPI across), 2 node(s) x 2 ranks (emulated nodes)".
  std::string description() const;
  // Every byte sent by any of this job's communicators, by level.
  LevelTraffic traffic() const;

  // Collectives within consecutive groups of group_size ranks (a sharding group) and across
  // them (the ranks with the same place in their groups), on communicators of their own, so
  // they may run alongside collectives(). Each is booked (and, with slow-link emulation,
  // throttled) as inter-node when its ranks sit on different nodes. Collective over the world;
  // group_size must divide the world size (the deck checks it).
  struct Groups {
    Communicator& within;
    Communicator& across;
  };
  Groups groups(int group_size);

  // Record every collective of collectives() and of the groups on the timeline.
  void trace_to(Timeline* timeline);

  // The small agreements (comm/agreements.hpp) over this stack's world, watched with its
  // collectives.
  JobAgreements& agreements() { return *agreements_; }

 private:
  // One group communicator: an MPI communicator of its own, its backend, watched and async.
  struct Lane {
    OwnedComm comm;
    std::unique_ptr<Communicator> backend, throttled;
    std::unique_ptr<Watchdog> watchdog;
    std::unique_ptr<WatchedCommunicator> watched;
    std::unique_ptr<AsyncCommunicator> async;
  };
  std::unique_ptr<Lane> make_lane(int color, const char* name);
  std::unique_ptr<Lane> within_, across_;
  int group_size_ = 0;

  const World& world_;
  Settings settings_;
  // Device runs: the MPI communicator inter_ stages to; declared first, so destroyed after it.
  std::unique_ptr<Communicator> inter_host_;
  std::unique_ptr<Communicator> flat_, intra_, inter_;
  std::unique_ptr<Communicator> slow_flat_, slow_inter_;  // slow-link emulation, when on
  std::string throttle_note_;
  bool shared_memory_ = false;
  std::unique_ptr<TwoLevelCommunicator> two_level_;
  bool two_level_active_ = false;
  std::unique_ptr<Watchdog> watchdog_;
  std::unique_ptr<WatchedCommunicator> watched_;
  std::unique_ptr<AsyncCommunicator> async_;
  std::unique_ptr<JobAgreements> agreements_;
};

}  // namespace st
