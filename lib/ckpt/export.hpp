#pragma once
// A checkpoint's parameters for other tools: a plain HDF5 file, or the flat fp32 values that the
// weight writers (weights/) turn into other formats.
#include <string>
#include <vector>

#include "ckpt/checkpoint.hpp"

namespace st {

// One process: an export to a plain HDF5 file with one dataset per tensor in its shape (the
// parameters only; no optimizer state).
void export_checkpoint(const std::string& path, const std::string& out);

// One process: the checkpoint's fp32 parameters (flat layout, every chunk's checksum verified by
// HDF5 as it reads) and its metadata, for exports to other formats.
struct CheckpointParams {
  CheckpointInfo info;
  std::vector<float> params;
};
CheckpointParams read_checkpoint_params(const std::string& path);

}  // namespace st
