#pragma once
// HDF5's Fletcher32 checksum (the H5Z_FILTER_FLETCHER32 filter), bit for bit, computable in
// pieces held by different ranks.
//
// HDF5 sums the data as big-endian 16-bit words w_0 .. w_{L-1}: sum1 = sum of w_i, sum2 = sum
// of (L - i) w_i, both kept modulo 65535 by folding, and stores (sum2 << 16) | sum1 after the
// chunk (little-endian). Folding keeps a sum that is not zero in 1 .. 65535, so the value is
// fixed by the sums modulo 65535 and whether any word is non-zero. A piece of m words followed
// by k more words of its chunk adds (sum of w_j) to sum1 and (sum of (m - j) w_j + k sum of
// w_j) to sum2; the pieces' parts add up to the chunk's sums.
#include <cstddef>
#include <cstdint>

namespace st::fletcher32 {

// One piece's share of a chunk's sums, reduced modulo 65535; `nonzero` counts pieces with a
// non-zero word (parts from several ranks are summed, then finished).
struct Part {
  std::uint64_t sum1 = 0, sum2 = 0, nonzero = 0;
};

// The part of `bytes` of data (an even number) that `bytes_after` more bytes of the chunk follow.
Part part(const void* data, std::size_t bytes, std::size_t bytes_after);

// Adds another piece's part.
void add(Part& into, const Part& other);

// The checksum HDF5 stores for a chunk whose parts are all added into `whole`.
std::uint32_t value(const Part& whole);

// The checksum of a whole chunk of `bytes` (even).
std::uint32_t of(const void* data, std::size_t bytes);

}  // namespace st::fletcher32
