#pragma once
// Where checkpoints are, answered in one place: their file names, the directory a run writes them
// to, the checkpoints a directory holds, and what any path a command is given stands for
// (classify). Reading, resuming (locate.hpp), retention, the check before an output is
// overwritten and the commands that take "a checkpoint, its directory, a run directory or
// weights" all ask here. One process, the file system only (no HDF5 opened, except by
// is_checkpoint).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "deck/config.hpp"

namespace st {

// The file name of a step's checkpoint: ckpt_00000300.h5.
std::string checkpoint_name(std::int64_t step);
// The step of a checkpoint's file name (ckpt_00000300.h5: 300), or -1 for any other name.
std::int64_t checkpoint_step_of(const std::string& filename);
// The checkpoint a `latest` file names ("ckpt_00000900.h5"), or "" when `path` is not one.
std::string pointer_target(const std::string& path);

// The run directory: run.out_dir with {deck} replaced by the deck's file name without extension.
std::string resolve_out_dir(const Config& config);
// Where a run's checkpoints go: checkpoint.dir, else the run directory's checkpoints/.
std::string checkpoint_dir_of(const Config& config);

// The ckpt_<step>.h5 files of `dir` with their commit times (a checkpoint's bytes are written and
// flushed before its rename, so its modification time is when it was committed), newest commit
// first, the higher step first among equal times.
struct CommittedCheckpoint {
  std::string path;
  std::int64_t step = 0;
  std::filesystem::file_time_type committed;
};
std::vector<CommittedCheckpoint> committed_checkpoints(const std::string& dir);
// The checkpoints of a directory in the order they are tried: the file `latest` names (listed
// even when it is missing, so that a dangling pointer is reported), then every ckpt_<step>.h5
// by commit time, newest first (steps break ties).
std::vector<std::string> checkpoint_candidates(const std::string& dir);

// What a path given to a command stands for.
enum class PathKind {
  missing,          // nothing there
  checkpoint_file,  // an HDF5 file: a checkpoint, or one whose reader names why it is not
  pointer,          // a `latest` file naming a checkpoint
  checkpoint_dir,   // a directory holding ckpt_<step>.h5 files or a `latest`
  run_dir,          // a directory whose checkpoints are in its checkpoints/ or the checkpoint.dir its resolved.toml names
  weights_file,     // any other file: weights (an llm.c file, model.safetensors, a sharded model's index.json), or
                    // nothing shardtrain reads (weights/gpt2_weights.hpp probe_weights tells which)
  weights_dir,      // a directory holding model.safetensors or model.safetensors.index.json, and no checkpoints
  other_dir,        // a directory holding neither checkpoints nor weights
};
struct PathClass {
  PathKind kind = PathKind::missing;
  // Where its checkpoints are: the directory (checkpoint_dir, run_dir) or the pointer's; else "".
  std::string dir;
};
PathClass classify(const std::string& path);

// Why `path` cannot be a checkpoint file, found before HDF5 opens it, with what to pass instead
// (one of a directory's checkpoints, the file a `latest` names); "" when it may be one.
// `resuming`: for checkpoint.resume, which also takes "latest" with checkpoint.dir.
std::string checkpoint_path_problem(const std::string& path, bool resuming);

// Whether `path` is a checkpoint or its pointer, which an export or a conversion never overwrites:
// a checkpoint's file name, a file named `latest` or naming a checkpoint, or any HDF5 file a
// checkpoint reader accepts.
bool is_checkpoint(const std::string& path);

}  // namespace st
