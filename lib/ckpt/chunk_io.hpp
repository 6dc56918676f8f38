#pragma once
// Direct chunk I/O for the checkpoint's state datasets (1-D float32, chunked, Fletcher32).
//
// HDF5 lays the file out (one rank, skeleton_file.hpp): the dataset headers, the chunk index
// and an allocation per chunk. The chunks' bytes then move in one pass from each rank's memory
// into the file, each chunk followed by the Fletcher32 checksum HDF5's filter stores, which the
// ranks compute together from partial sums (fletcher32.hpp). Each rank writes its own disjoint
// extents on its own (no collective buffering: every byte goes straight from its rank to the
// file), the whole pages among them with O_DIRECT. Reading pulls whole chunks into place and
// verifies each checksum.
//
// Why not H5Dwrite/H5Dread: the filtered collective path copies every chunk into the filter
// pipeline and again to append the checksum, and moved about 0.3 GB/s per process here
// (docs/benchmarks.md). The files stay standard HDF5: h5py, h5dump and `shardtrain ckpt
// inspect` read them through HDF5's own filter, which verifies the same checksums.
#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/h5.hpp"
#include "ckpt/phase_log.hpp"
#include "ckpt/phase_log.hpp"

namespace st::h5 {

// How a 1-D float32 dataset is stored: chunks of `chunk` elements (the last one padded with
// zeros to full size), each followed by its 4-byte checksum.
struct ChunkGeometry {
  std::uint64_t elements = 0, chunk = 0;
  std::uint64_t chunks() const { return (elements + chunk - 1) / chunk; }
  std::uint64_t chunk_bytes() const { return chunk * sizeof(float); }
  std::uint64_t stored_bytes() const { return chunk_bytes() + 4; }
  // One past the last real element of chunk c.
  std::uint64_t chunk_end(std::uint64_t c) const { return std::min(elements, (c + 1) * chunk); }
};

// The geometry of `dataset` when it is stored as direct chunk I/O expects: 1-D little-endian
// float32, chunked, with Fletcher32 as its only filter. Otherwise nullopt.
std::optional<ChunkGeometry> direct_geometry(hid_t dataset);

// The file offset of every chunk of `dataset`; throws when one is not allocated, skipped its
// filter or has another stored size than the geometry says.
std::vector<std::uint64_t> chunk_offsets(hid_t dataset, const ChunkGeometry& geometry);

// What one rank writes into one dataset: ranges of elements (sorted; disjoint across ranks and
// covering the dataset together) and, for each range, where its elements are in memory.
struct ChunkedWrite {
  ChunkGeometry geometry;
  std::vector<Range> ranges;
  std::vector<const float*> data;
  std::vector<std::uint64_t> chunk_offsets;  // of every chunk of the dataset
};
// How write_chunks moves the bytes. Direct (O_DIRECT) writes of the whole pages of each rank's
// runs, staged through `stage_bytes` (a multiple of 4096), when the file system takes them;
// otherwise, or with direct = false, everything through the page cache.
struct WriteOptions {
  bool direct = true;
  std::uint64_t stage_bytes = std::uint64_t{16} << 20;
};

// Collective over comm, after HDF5 has closed the file at `path`: the ranks add up the
// Fletcher32 sums, then each rank on its own writes its ranges of every dataset, and the
// checksum (and the last chunk's padding) of each chunk whose last element it holds, and flushes
// them to storage (fsync). Throws the same Error on every rank when any rank failed. When `log`
// is given, the phases go into it: checksums, open, write, file_sync, close.
void write_chunks(const std::string& path, const std::vector<ChunkedWrite>& writes, MPI_Comm comm,
                  PhaseLog* log = nullptr, const WriteOptions& options = {});

// What one rank reads from one dataset: sorted ranges, each into its own memory.
struct ChunkedRead {
  std::string name;
  ChunkGeometry geometry;
  std::vector<Range> ranges;
  std::vector<float*> into;
  std::vector<std::uint64_t> chunk_offsets;  // of every chunk of the dataset
};
// Local: reads the ranges from the file at `path` and verifies the checksum of every chunk it
// touches; throws Error naming the dataset, chunk and file offset of the first bad one.
void read_chunks(const std::string& path, const ChunkedRead& read);

}  // namespace st::h5
