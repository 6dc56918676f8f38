#pragma once
// Writing a checkpoint: the state taken from the strategy (a view or a copy), the collective
// write of every rank's slices and rank 0's atomic commit, with retention.
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "ckpt/phase_log.hpp"
#include "model/layout.hpp"
#include "parallel/strategy.hpp"

namespace st {

// What one rank writes: pieces of the flat layout with their parameters, m and v, either where
// the strategy keeps them (a view: nothing copied, valid until training changes them) or in
// copies the snapshot owns (training may go on while they are written). Move-only: the pieces
// point into `copies`.
struct StateSnapshot {
  std::vector<Strategy::StatePiece> pieces;
  std::vector<float> copies;
  StateSnapshot() = default;
  StateSnapshot(StateSnapshot&&) = default;
  StateSnapshot& operator=(StateSnapshot&&) = default;
  StateSnapshot(const StateSnapshot&) = delete;
  StateSnapshot& operator=(const StateSnapshot&) = delete;
};
StateSnapshot view_state(Strategy& strategy);
// Copies into `storage`'s memory when it is large enough (a previous snapshot's, handed back):
// fresh memory costs a page fault per 4 KiB, which was most of the copy's time.
StateSnapshot copy_state(Strategy& strategy, std::vector<float> storage = {});

// Writes `dir`/ckpt_<step>.h5 through a temporary name, flushes, renames it into place (rank 0,
// then the directory is synced), points `dir`/latest at it and keeps this run's `keep` most
// recently committed checkpoints (ckpt/locate.hpp plan_retention: never the one just written,
// never another run's or model's). Collective over comm. Returns what was written. When `log` is given, the write's phases go into
// it (rank 0's clock): layout, checksums, open, write_<round>, file_sync, close, then on rank 0
// fsync, rename (with the directory's fsync), latest, keep, and commit_agree (the others wait).
// When `deferred_deletes` is given, rank 0 adds the files that `keep` (and leftovers of
// interrupted writes) let go to it instead of deleting them: deleting a 1.36 GB file took
// 0.17-0.28 s here (ext4 mounted with `discard` waits for the device), which the caller can take
// off the training's critical path with remove_files.
struct WrittenCheckpoint {
  std::string path;
  // The bytes of state the file holds (checkpoint_state_bytes of the layout written).
  std::uint64_t bytes = 0;
  // Rank 0: checkpoints in the directory of another run (another run_id or model, or unreadable)
  // that retention left alone, each with why, and what the commit moved out of its way
  // (ckpt/locate.hpp set_aside_other_run).
  std::vector<std::string> left_alone, set_aside;
};
WrittenCheckpoint write_checkpoint(const std::string& dir, const CheckpointInfo& info, const ParamLayout& layout,
                                   const StateSnapshot& state, int keep, MPI_Comm comm, PhaseLog* log = nullptr,
                                   std::vector<std::string>* deferred_deletes = nullptr);
// Deletes the files, ignoring those already gone.
void remove_files(const std::vector<std::string>& paths);

// The bytes of state a checkpoint of `layout` holds: the fp32 parameters, Adam's m and v, each
// the whole flat layout (what a write moves and a resume reads, whatever the strategy shards).
std::uint64_t checkpoint_state_bytes(const ParamLayout& layout);

}  // namespace st
