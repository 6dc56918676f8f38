#pragma once
// The run's memory lines: what its buffers hold per rank (parameters, gradients, optimizer
// state, workspace, activations, the checkpoint copy), the largest rank's total, and on the host
// the process's measured peak above what it held before the run's buffers, and its proportional
// set above the same point (shared pages split between the ranks that read them).
#include <cstdint>
#include <string>

#include "train/run_dir.hpp"
#include "train/sharded_model.hpp"

namespace st {

class MemoryMeter {
 public:
  // Made before the run's buffers: what the process holds now is not the run's.
  MemoryMeter();
  // The run's buffers are in place and set: the peak from here on is training's (where the
  // kernel lets the peak be restarted).
  void buffers_ready();

  // "memory WHEN (rank 0): params ..., = TOTAL (largest rank ...); measured peak ...", and every
  // figure (the proportional set too) as a metrics line on rank 0 (metrics may be null
  // elsewhere). Collective (the largest rank's total).
  std::string line(const std::string& when, ShardedModel& net, std::uint64_t checkpoint_copy,
                   RunDirectory* metrics) const;

 private:
  std::uint64_t resident_before_ = 0;
  std::uint64_t proportional_before_ = 0;
  bool peak_restarted_ = false;
};

}  // namespace st
