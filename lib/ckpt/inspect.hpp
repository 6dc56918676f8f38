#pragma once
// `shardtrain ckpt inspect`: what a checkpoint holds, as text.
#include <string>

namespace st {

// One process: what a checkpoint holds (its metadata, model, tensors, each state dataset's L2
// norm, the run's settings), with every checksum verified (throws on the first problem).
std::string inspect_checkpoint(const std::string& path);

}  // namespace st
