#pragma once
// What rank 0 finds in a checkpoint before the ranks read it (its metadata, checked against the
// model, and where the state's chunks are), shared with every rank: a resume's read and a
// verification start from it. Internal to ckpt/.
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "ckpt/chunk_io.hpp"

namespace st {

// What rank 0 finds in a checkpoint and every rank needs in order to read its part.
struct ReadPlan {
  CheckpointInfo info;
  // Set when all three state datasets are stored as this shardtrain writes them; then the file
  // offsets of their chunks, /params, /adam_m, /adam_v one after the other.
  std::optional<h5::ChunkGeometry> geometry;
  std::vector<std::uint64_t> chunk_offsets;
};

// Rank 0: opens the file, checks it against the run's model and locates the state's chunks.
ReadPlan plan_read(const std::string& path, const ModelShape& shape);

// Rank 0 makes the plan (reads the file's metadata, and where the chunks are) and shares it: one
// process, not every rank, walks HDF5's headers and chunk index. On failure every rank throws
// the same Error naming the file.
ReadPlan plan_on_rank0(const std::string& path, MPI_Comm comm, const std::function<ReadPlan()>& make_plan);

}  // namespace st
