#pragma once
// How a checkpoint file is laid out, for the parts of ckpt/ that write, read, verify, inspect and
// export one (checkpoint.hpp describes the format): the state datasets and their chunks, the
// metadata attributes by kCheckpointFields, the tensor table's shape text. Not for callers
// outside ckpt/.
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/checkpoint.hpp"

namespace st {

// 1 MiB chunks (256 Ki elements). A rank reads and verifies every chunk it touches whole, also
// the two at the ends of each slice it holds, which it shares with a neighbour: with 4 MiB
// chunks that was about a third more than a zero3 rank needs of a 113.7M model and the resume
// read took 0.36-0.43 s, with 1 MiB chunks 0.23-0.28 s (docs/benchmarks.md).
inline constexpr std::uint64_t kChunkElements = std::uint64_t{1} << 18;
// The state datasets, in the order the chunk offsets list them.
inline constexpr const char* kStateDatasets[] = {"params", "adam_m", "adam_v"};

// Chunk offsets of /params, /adam_m, /adam_v one after the other: those of dataset k.
std::vector<std::uint64_t> offsets_of(const std::vector<std::uint64_t>& all, std::size_t k, std::uint64_t chunks);

// A tensor's shape as /layout/shapes holds it ("768x2304"), and back.
std::string shape_text(const std::vector<std::int64_t>& shape);
std::vector<std::int64_t> parse_shape(const std::string& text);

// The metadata at / and /model (kCheckpointFields). read_info names what an HDF5 file is when it
// is no checkpoint (an export, a newer format, a missing llama key); throws Error without the path.
CheckpointInfo read_info(hid_t file);
// One field, when it is recorded for this model (field_recorded).
void write_field(hid_t at, const CheckpointInfo& info, const CheckpointField& field);

// Throws Error unless the three state datasets are there, each of `elements` elements.
void require_state_datasets(hid_t file, std::uint64_t elements);

}  // namespace st
