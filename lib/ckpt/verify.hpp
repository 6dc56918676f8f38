#pragma once
// Verifying a checkpoint without a model to read it into: every chunk's checksum.
#include <mpi.h>

#include <string>

#include "ckpt/checkpoint.hpp"

namespace st {

// What verify_checkpoint read: the sum of squares of each state dataset (/params, /adam_m,
// /adam_v, in that order) and the checkpoint's metadata.
struct VerifiedCheckpoint {
  CheckpointInfo info;
  double sum_squares[3] = {0, 0, 0};
};
// Reads every chunk of the three state datasets and checks its Fletcher32 checksum, the ranks of
// `comm` each taking a share of the chunks: the checks a resume makes, without a model to read
// into (check, inspect, generate and eval use it). Collective; on the first problem every rank
// throws the same Error, naming the file and, for damaged data, the dataset, the chunk, its
// elements and its file offset, as a resume does.
VerifiedCheckpoint verify_checkpoint(const std::string& path, MPI_Comm comm);

}  // namespace st
