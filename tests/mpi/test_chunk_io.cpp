// Direct chunk I/O on 1..4 ranks, into a file laid out without its data (SkeletonFile): what the
// ranks write (each several slices that start and end inside chunks) is read back exactly by
// HDF5's own filtered read, which verifies the Fletcher32 checksums the ranks computed together;
// the direct reader returns the same values; a damaged byte is found and named.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "ckpt/chunk_io.hpp"
#include "ckpt/h5.hpp"
#include "ckpt/skeleton_file.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "world.hpp"

namespace st {
namespace {

// Element i's value: distinct, signed, with a run of zeros (a chunk of zeros has checksum 0)
// and negative zeros (non-zero bytes).
float value(std::uint64_t i) {
  if (i >= 2000 && i < 3000) return 0.0f;
  if (i % 101 == 0) return -0.0f;
  return static_cast<float>(std::sin(0.001 * static_cast<double>(i)) * 1000.0);
}

// Slices of [0, n) cut at uneven places, dealt to the ranks in turn: each rank holds several,
// most starting and ending inside a chunk.
std::vector<h5::Range> my_ranges(std::uint64_t n, std::uint64_t chunk) {
  std::vector<h5::Range> mine;
  std::uint64_t at = 0;
  for (int k = 0; at < n; ++k) {
    const std::uint64_t length = std::min(n - at, chunk / 3 + 7 * static_cast<std::uint64_t>(k % 5) * chunk / 10 + 1);
    if (k % world_size() == world_rank()) mine.push_back({at, length});
    at += length;
  }
  return mine;
}

std::string shared_path(const std::string& name) {
  return "chunk_io_" + name + "_" + std::to_string(world_size()) + ".h5";
}

// Writes an n-element dataset in chunks of `chunk` from every rank's slices; returns the path.
std::string write_dataset(const std::string& name, std::uint64_t n, std::uint64_t chunk,
                          const h5::WriteOptions& options = {}, PhaseLog* log = nullptr,
                          double* write_seconds = nullptr) {
  const std::string path = shared_path(name);
  const auto ranges = my_ranges(n, chunk);
  std::vector<std::vector<float>> values;
  h5::ChunkedWrite w;
  w.geometry = {n, chunk};
  w.ranges = ranges;
  for (const auto& r : ranges) {
    values.emplace_back(r.count);
    for (std::uint64_t i = 0; i < r.count; ++i) values.back()[i] = value(r.offset + i);
    w.data.push_back(values.back().data());
  }
  // As a checkpoint is written: rank 0 lays the file out without the data, every rank learns
  // where the chunks are.
  std::vector<std::uint64_t> offsets(w.geometry.chunks());
  if (world_rank() == 0) {
    h5::SkeletonFile file(path);
    file.skip_raw_data(true);
    h5::Handle d = h5::create_float_dataset(file.get(), "x", n, chunk);
    offsets = h5::chunk_offsets(d.get(), w.geometry);
    d = h5::Handle();
    file.close("closing " + path);
  }
  MPI_Bcast(offsets.data(), static_cast<int>(offsets.size()), MPI_UINT64_T, 0, MPI_COMM_WORLD);
  w.chunk_offsets = offsets;
  if (log) log->skip();
  Stopwatch clock;
  h5::write_chunks(path, {w}, MPI_COMM_WORLD, log, options);
  if (write_seconds) *write_seconds = clock.seconds();
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

void expect_values(const std::vector<float>& got, std::uint64_t from) {
  std::uint64_t wrong = 0;  // bit for bit: negative zeros must stay negative
  for (std::uint64_t i = 0; i < got.size(); ++i) {
    const float want = value(from + i);
    if (std::memcmp(&got[i], &want, sizeof want) != 0) ++wrong;
  }
  EXPECT_EQ(wrong, 0u) << "of " << got.size() << " elements from " << from;
}

// (elements, chunk, direct writes): small chunks leave few whole pages inside a rank's run, large
// ones many, written directly.
using Case = std::tuple<std::uint64_t, std::uint64_t, bool>;
class ChunkIo : public ::testing::TestWithParam<Case> {};

TEST_P(ChunkIo, Hdf5ReadsBackWhatTheRanksWrote) {
  const auto [n, chunk, direct] = GetParam();
  const std::string path = write_dataset("roundtrip", n, chunk, {direct, std::uint64_t{16} << 20});
  // HDF5's own read: its Fletcher32 filter verifies every chunk.
  h5::Handle file = h5::open_file_serial(path);
  h5::Handle d = h5::open_dataset(file.get(), "x");
  std::vector<float> all(n);
  h5::read_ranges(d.get(), {{0, n}}, all.data());
  expect_values(all, 0);
  // The direct reader, on slices that differ from the writers'.
  const auto geometry = h5::direct_geometry(d.get());
  ASSERT_TRUE(geometry.has_value());
  EXPECT_EQ(geometry->elements, n);
  EXPECT_EQ(geometry->chunk, chunk);
  const std::uint64_t from = n / 3 + 5, count = n / 2;
  std::vector<float> some(count), tail(10);
  const std::vector<h5::Range> ranges = {{from, count}, {n - 10, 10}};
  h5::read_chunks(path, {"x", *geometry, ranges, {some.data(), tail.data()}, h5::chunk_offsets(d.get(), *geometry)});
  expect_values(some, from);
  expect_values(tail, n - 10);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Geometries, ChunkIo,
                         ::testing::Values(Case{10'123, 1000, true},      // padded last chunk
                                           Case{8'000, 1000, true},       // whole chunks
                                           Case{777, 777, true},          // one chunk
                                           Case{1'234'567, 40'000, true},  // runs of many whole pages
                                           Case{1'234'567, 40'000, false},
                                           Case{10'123, 1000, false}));

TEST(ChunkIoStaging, AStagingBufferOfTwoPagesFilledManyTimes) {
  // Runs of 50-450 KB through 8 KiB of staging: dozens of direct writes per run, each run
  // starting and ending inside a page.
  const std::uint64_t n = 1'234'567, chunk = 40'000;
  const std::string path = write_dataset("staging", n, chunk, {true, 8192});
  h5::Handle file = h5::open_file_serial(path);
  h5::Handle d = h5::open_dataset(file.get(), "x");
  std::vector<float> all(n);
  h5::read_ranges(d.get(), {{0, n}}, all.data());
  expect_values(all, 0);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::remove(path.c_str());
}

TEST(ChunkIoStaging, OneRankFailingFailsEveryRankWithItsReason) {
  // Only the last rank is given a staging size that is not whole pages: it fails before writing,
  // the others write, and all of them throw its error (none is left waiting).
  const std::uint64_t n = 10'123, chunk = 1000;
  const bool bad = world_rank() == world_size() - 1;
  try {
    write_dataset("bad_staging", n, chunk, {true, bad ? 3000 : std::uint64_t{16} << 20});
    ADD_FAILURE() << "a staging size of 3000 bytes on rank " << world_size() - 1 << " was taken";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("not a multiple of 4096"), std::string::npos) << what;
    if (!bad) {
      EXPECT_EQ(what.rfind("rank " + std::to_string(world_size() - 1) + ": ", 0), 0u) << what;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::remove(shared_path("bad_staging").c_str());
}

TEST(ChunkIoPhases, EveryPhaseIsNamedAndTheyAddUpToTheWrite) {
  const std::uint64_t n = 1'234'567, chunk = 40'000;
  PhaseLog log;
  double seconds = 0;
  const std::string path = write_dataset("phases", n, chunk, {}, &log, &seconds);
  std::vector<std::string> names;
  for (const auto& [name, s] : log.phases()) {
    names.push_back(name);
    EXPECT_GE(s, 0.0) << name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"checksums", "open", "write", "file_sync", "close"}));
  // Together they are the whole of write_chunks: at most the clock around it, and short of it
  // by no more than returning takes.
  EXPECT_GT(log.total(), 0.0);
  EXPECT_LE(log.total(), seconds + 1e-9);
  EXPECT_GE(log.total(), seconds - 0.005) << log.text();
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::remove(path.c_str());
}

TEST(ChunkIoDamage, AFlippedByteIsFoundAndNamed) {
  const std::uint64_t n = 5000, chunk = 1000;
  const std::string path = write_dataset("damage", n, chunk);
  h5::Handle file = h5::open_file_serial(path);
  h5::Handle d = h5::open_dataset(file.get(), "x");
  const auto geometry = *h5::direct_geometry(d.get());
  const std::vector<h5::Range> ranges = {{0, n}};
  const std::vector<std::uint64_t> offsets = h5::chunk_offsets(d.get(), geometry);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offsets[3] + 40));
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x04);
    f.seekp(static_cast<std::streamoff>(offsets[3] + 40));
    f.write(&byte, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<float> all(n);
  try {
    h5::read_chunks(path, {"x", geometry, ranges, {all.data()}, offsets});
    ADD_FAILURE() << "the damaged chunk was read without complaint";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("dataset '/x' chunk 3 (elements 3000-3999"), std::string::npos) << what;
    EXPECT_NE(what.find("Fletcher32 checksum mismatch"), std::string::npos) << what;
  }
  // HDF5's filter agrees that the chunk is bad, and that the others are good.
  EXPECT_THROW(h5::read_ranges(d.get(), {{3000, 1000}}, all.data()), Error);
  std::vector<float> good(1000);
  h5::read_chunks(path, {"x", geometry, {{4000, 1000}}, {good.data()}, offsets});
  expect_values(good, 4000);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::remove(path.c_str());
}

}  // namespace
}  // namespace st
