#include "ckpt/verify.hpp"

#include <algorithm>

#include "ckpt/chunk_io.hpp"
#include "ckpt/file_format.hpp"
#include "ckpt/h5.hpp"
#include "ckpt/read.hpp"
#include "ckpt/read_plan.hpp"
#include "comm/agree.hpp"
#include "comm/group.hpp"
#include "comm/values.hpp"
#include "core/error.hpp"

namespace st {

VerifiedCheckpoint verify_checkpoint(const std::string& path, MPI_Comm comm) {
  // Rank 0 finds the chunks (and checks the datasets against the model the file says it holds).
  ReadPlan plan = plan_on_rank0(path, comm, [&] { return plan_read(path, read_checkpoint_header(path).shape); });
  const int rank = group_rank(comm), ranks = group_size(comm);
  VerifiedCheckpoint out;
  out.info = plan.info;
  const std::uint64_t elements = make_layout(plan.info.shape).total();
  std::string problem;
  try {
    std::vector<float> buffer;
    if (plan.geometry) {
      // Each rank reads a contiguous share of every dataset's chunks, a few at a time, exactly as
      // a resume reads them (h5::read_chunks verifies each chunk it touches).
      const h5::ChunkGeometry& g = *plan.geometry;
      const std::uint64_t chunks = g.chunks(), per_read = 64;
      const std::uint64_t first = chunks * static_cast<std::uint64_t>(rank) / static_cast<std::uint64_t>(ranks);
      const std::uint64_t last = chunks * static_cast<std::uint64_t>(rank + 1) / static_cast<std::uint64_t>(ranks);
      for (std::size_t k = 0; k < 3; ++k) {
        const std::vector<std::uint64_t> offsets = offsets_of(plan.chunk_offsets, k, chunks);
        for (std::uint64_t c = first; c < last; c += per_read) {
          const std::uint64_t begin = c * g.chunk, end = g.chunk_end(std::min(last, c + per_read) - 1);
          buffer.resize(end - begin);
          h5::read_chunks(path, {kStateDatasets[k], g, {{begin, end - begin}}, {buffer.data()}, offsets});
          for (float x : buffer) out.sum_squares[k] += static_cast<double>(x) * x;
        }
      }
    } else if (rank == 0) {  // stored otherwise (h5repack, say): HDF5's filter verifies as it reads
      h5::Handle file = h5::open_file_serial(path);
      for (std::size_t k = 0; k < 3; ++k) {
        h5::Handle d = h5::open_dataset(file.get(), kStateDatasets[k]);
        for (std::uint64_t at = 0; at < elements; at += kChunkElements) {
          const std::uint64_t n = std::min<std::uint64_t>(kChunkElements, elements - at);
          buffer.resize(n);
          try {
            h5::read_ranges(d.get(), {{at, n}}, buffer.data());
          } catch (const Error& e) {
            throw Error(std::string("dataset '/") + kStateDatasets[k] + "' elements " + std::to_string(at) + "-" +
                        std::to_string(at + n - 1) + ": " + e.what());
          }
          for (float x : buffer) out.sum_squares[k] += static_cast<double>(x) * x;
        }
      }
    }
  } catch (const Error& e) {
    problem = "checkpoint " + path + ": " + e.what();
  }
  agree_or_throw(comm, problem, false);  // the message names the chunk, whichever rank read it
  reduce_each(std::span<double>(out.sum_squares), Reduction::sum, comm);
  return out;
}

}  // namespace st
