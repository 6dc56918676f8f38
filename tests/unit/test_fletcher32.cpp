// Fletcher32 as HDF5 computes it: the vector kernel and the piecewise sums against a plain
// transcription of HDF5's loop (words big-endian, sums folded every 360 words). Agreement with
// the HDF5 library itself is checked in tests/mpi/test_chunk_io.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "ckpt/fletcher32.hpp"

namespace st {
namespace {

std::uint32_t reference_fletcher32(const std::vector<unsigned char>& bytes) {
  const unsigned char* data = bytes.data();
  std::size_t words = bytes.size() / 2;
  std::uint32_t sum1 = 0, sum2 = 0;
  while (words > 0) {
    std::size_t n = words > 360 ? 360 : words;
    words -= n;
    do {
      sum1 += (static_cast<std::uint32_t>(data[0]) << 8) | data[1];
      data += 2;
      sum2 += sum1;
    } while (--n);
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  sum1 = (sum1 & 0xffff) + (sum1 >> 16);
  sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  return (sum2 << 16) | sum1;
}

std::vector<unsigned char> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

TEST(Fletcher32, MatchesHdf5LoopOnRandomData) {
  // Sizes around the kernel's 128-word blocks and HDF5's 360-word folds, and a 4 MiB chunk.
  for (std::size_t bytes : {2u, 4u, 254u, 256u, 258u, 720u, 722u, 4096u, 100002u, 4u << 20}) {
    const auto data = random_bytes(bytes, static_cast<std::uint32_t>(bytes));
    EXPECT_EQ(fletcher32::of(data.data(), data.size()), reference_fletcher32(data)) << bytes << " bytes";
  }
}

TEST(Fletcher32, FoldedZeroAndAllZero) {
  // All-zero data sums to 0; all-0xff words sum to multiples of 65535, which HDF5 keeps as 0xffff.
  const std::vector<unsigned char> zeros(4096, 0), ones(4096, 0xff);
  EXPECT_EQ(fletcher32::of(zeros.data(), zeros.size()), 0u);
  EXPECT_EQ(reference_fletcher32(ones), 0xffffffffu);
  EXPECT_EQ(fletcher32::of(ones.data(), ones.size()), 0xffffffffu);
  std::vector<unsigned char> one_word(4096, 0);
  one_word[4094] = 0x12;  // a single non-zero word at the end
  EXPECT_EQ(fletcher32::of(one_word.data(), one_word.size()), reference_fletcher32(one_word));
}

TEST(Fletcher32, PiecesAddUpToTheChunk) {
  // A chunk cut at arbitrary even offsets into pieces (as ranks hold it): their parts, each
  // told how many bytes follow it, add up to the checksum of the whole.
  const auto data = random_bytes(3u << 20, 7);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::size_t> cuts = {0, data.size()};
    const int pieces = 1 + trial % 6;
    for (int i = 1; i < pieces; ++i) cuts.push_back(2 * (rng() % (data.size() / 2)));
    std::sort(cuts.begin(), cuts.end());
    fletcher32::Part whole;
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i)
      fletcher32::add(whole, fletcher32::part(data.data() + cuts[i], cuts[i + 1] - cuts[i], data.size() - cuts[i + 1]));
    EXPECT_EQ(fletcher32::value(whole), reference_fletcher32(data)) << "trial " << trial;
  }
}

TEST(Fletcher32, ADamagedByteChangesTheChecksum) {
  auto data = random_bytes(1 << 16, 3);
  const std::uint32_t good = fletcher32::of(data.data(), data.size());
  data[12345] ^= 0x10;
  EXPECT_NE(fletcher32::of(data.data(), data.size()), good);
}

}  // namespace
}  // namespace st
