#pragma once
// Writes the run's checkpoints, synchronously or in the background (checkpoint.async): the
// state is copied out of the strategy, training goes on, and the write and its atomic commit
// complete on a thread of their own over a duplicate of the world communicator.
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/write.hpp"
#include "comm/agreements.hpp"
#include "comm/watchdog.hpp"
#include "comm/world.hpp"

namespace st {

class Checkpointer {
 public:
  struct Done {
    std::string path;
    std::int64_t step = 0;
    std::uint64_t bytes = 0;   // the state the file holds (WrittenCheckpoint)
    double seconds = 0;        // the write, from the copy to the commit
    double stall_seconds = 0;  // how long training waited for it
    double copy_seconds = 0;   // of the stall, copying the state (async)
    PhaseLog phases;           // the write's phases on rank 0 (write_checkpoint)
    std::vector<std::string> left_alone, set_aside;  // rank 0: another run's checkpoints (WrittenCheckpoint)
  };

  // `agreements` are between every rank of the job (is a background write finished?), watched
  // for hangs like every collective of the run; the write itself runs over `world` (or a
  // duplicate of it for a background write), watched by a watchdog of its own with
  // checkpoint.timeout_s: a write that overruns it (a hung file system, a rank or host gone in
  // the middle of the collective I/O) ends the job with a report of what every rank is doing and
  // exit code 5. The directory was checked before training (run_directories_problem).
  Checkpointer(JobAgreements& agreements, MPI_Comm world, std::string dir, int keep, double timeout_s, bool async);
  ~Checkpointer();  // waits for a write in progress
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Collective. Waits for the previous write if one is still going (async), copies the state
  // and writes it (sync) or starts writing it (async). Returns the writes that finished: the
  // previous one if it had to be waited for, this one when sync.
  std::vector<Done> save(const CheckpointInfo& info, const ParamLayout& layout, Strategy& strategy);
  // Collective: whether the background write has finished on every rank; if so, its result
  // (errors on any rank are thrown on every rank).
  std::optional<Done> poll();
  // Collective: wait for the background write, if any, and return its result.
  std::optional<Done> finish();
  // Host memory held for copies of the state (async: kept from one checkpoint to the next).
  std::uint64_t copy_bytes() const { return copy_bytes_; }

 private:
  std::optional<Done> join();
  // The write of snapshot_ at `step`, registered with watchdog_ for as long as the scope lives.
  Watchdog::Scope watch_write(std::int64_t step);
  JobAgreements& agreements_;
  MPI_Comm world_;
  OwnedComm io_comm_;  // the background write's own communicator
  std::string dir_;
  int keep_;
  bool async_;
  std::unique_ptr<Watchdog> watchdog_;
  std::thread thread_;
  std::atomic<bool> finished_{false};
  std::string error_;
  Done result_;
  StateSnapshot snapshot_;
  std::vector<float> spare_;  // async: the last snapshot's copy, reused by the next one
  // Rank 0: deletes the checkpoints `keep` let go while training goes on (a sync write's
  // critical path loses 0.17-0.28 s per 1.36 GB here); joined before the next write.
  std::thread deleter_;
  std::uint64_t copy_bytes_ = 0;
};

}  // namespace st
