#pragma once
// Reading a checkpoint: into a run's strategy (a resume, generate, eval), or its metadata only.
#include <mpi.h>

#include <string>

#include "ckpt/checkpoint.hpp"
#include "parallel/strategy.hpp"

namespace st {

// Reads what this rank needs into the strategy after checking the file against the run's model
// shape. Collective; on any rank's failure every rank throws the same Error naming the file.
CheckpointInfo read_checkpoint(const std::string& path, const ModelShape& shape, Strategy& strategy, MPI_Comm comm);

// One process: what a checkpoint says of itself (its attributes and model shape), after the
// checks that name what a path is when it is no checkpoint. Throws Error (without the path).
CheckpointInfo read_checkpoint_header(const std::string& path);

// What a checkpoint says of itself (step, strategy, the deck that wrote it, the model shape),
// read by rank 0 and shared. Collective; on failure every rank throws the same Error naming the
// file.
CheckpointInfo read_checkpoint_info(const std::string& path, MPI_Comm comm);

}  // namespace st
