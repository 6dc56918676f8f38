#include "ckpt/chunk_io.hpp"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "ckpt/fletcher32.hpp"
#include "comm/agree.hpp"
#include "comm/values.hpp"
#include "core/error.hpp"

namespace st::h5 {
namespace {

// The part of one range that lies in one chunk: elements [begin, end) of chunk c, the
// `at`-th element onwards of range r.
struct ChunkSlice {
  std::uint64_t chunk, begin, end;
  std::size_t range;
  std::uint64_t at;
  std::uint64_t bytes() const { return (end - begin) * sizeof(float); }
  // Where the slice starts in its chunk, and what is left of the chunk after it (for the last
  // chunk of a dataset, that includes the padding up to the full chunk size), in bytes.
  std::uint64_t offset_in_chunk(const ChunkGeometry& g) const { return (begin - chunk * g.chunk) * sizeof(float); }
  std::uint64_t bytes_after(const ChunkGeometry& g) const { return ((chunk + 1) * g.chunk - end) * sizeof(float); }
};

// Calls f(slice) for every chunk slice of the ranges, in order.
template <class F>
void for_each_slice(const ChunkGeometry& g, const std::vector<Range>& ranges, F&& f) {
  for (std::size_t r = 0; r < ranges.size(); ++r) {
    std::uint64_t at = ranges[r].offset;
    const std::uint64_t end = ranges[r].offset + ranges[r].count;
    while (at < end) {
      const std::uint64_t c = at / g.chunk;
      const std::uint64_t stop = std::min(end, (c + 1) * g.chunk);
      f(ChunkSlice{c, at, stop, r, at - ranges[r].offset});
      at = stop;
    }
  }
}

std::string errno_text() { return std::strerror(errno); }

std::uint32_t little_endian_u32(const unsigned char* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

void store_little_endian(std::uint32_t v, unsigned char* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

// A file descriptor that closes itself.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads exactly the bytes the iovecs ask for at `offset`; false at end of file.
bool read_fully(int fd, iovec* iov, int count, std::uint64_t offset, const std::string& what) {
  while (count > 0) {
    const ssize_t got = ::preadv(fd, iov, count, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw Error("cannot read " + what + ": " + errno_text());
    }
    if (got == 0) return false;
    offset += static_cast<std::uint64_t>(got);
    auto left = static_cast<std::size_t>(got);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return true;
}

}  // namespace

std::optional<ChunkGeometry> direct_geometry(hid_t dataset) {
  Handle type(H5Dget_type(dataset), H5Tclose, "dataset type");
  if (check(H5Tequal(type.get(), H5T_IEEE_F32LE), "dataset type") <= 0) return std::nullopt;
  Handle space(H5Dget_space(dataset), H5Sclose, "dataset space");
  if (check(H5Sget_simple_extent_ndims(space.get()), "dataset rank") != 1) return std::nullopt;
  hsize_t dims[1] = {0};
  check(H5Sget_simple_extent_dims(space.get(), dims, nullptr), "dataset extent");
  Handle dcpl(H5Dget_create_plist(dataset), H5Pclose, "dataset creation properties");
  if (H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return std::nullopt;
  hsize_t chunk[1] = {0};
  if (check(H5Pget_chunk(dcpl.get(), 1, chunk), "chunk shape") != 1 || chunk[0] == 0) return std::nullopt;
  if (check(H5Pget_nfilters(dcpl.get()), "filters") != 1) return std::nullopt;
  unsigned flags = 0;
  std::size_t n_values = 0;
  unsigned filter_config = 0;
  const H5Z_filter_t filter =
      check(H5Pget_filter2(dcpl.get(), 0, &flags, &n_values, nullptr, 0, nullptr, &filter_config), "filter");
  if (filter != H5Z_FILTER_FLETCHER32) return std::nullopt;
  return ChunkGeometry{dims[0], chunk[0]};
}

std::vector<std::uint64_t> chunk_offsets(hid_t dataset, const ChunkGeometry& g) {
  std::vector<std::uint64_t> offsets;
  for (std::uint64_t c = 0; c < g.chunks(); ++c) {
    const hsize_t coordinate[1] = {c * g.chunk};
    unsigned filter_mask = 0;
    haddr_t address = HADDR_UNDEF;
    hsize_t size = 0;
    check(H5Dget_chunk_info_by_coord(dataset, coordinate, &filter_mask, &address, &size),
          "chunk " + std::to_string(c) + " location");
    if (address == HADDR_UNDEF) throw Error("chunk " + std::to_string(c) + " is not allocated");
    if (filter_mask != 0) throw Error("chunk " + std::to_string(c) + " is stored without its checksum");
    if (size != g.stored_bytes())
      throw Error("chunk " + std::to_string(c) + " is stored in " + std::to_string(size) + " bytes, not " +
                  std::to_string(g.stored_bytes()));
    offsets.push_back(address);
  }
  return offsets;
}

namespace {

// Each rank's share of the Fletcher32 sums of every chunk of every dataset (three numbers per
// chunk, datasets one after the other); added over the ranks, they give the checksums.
std::vector<std::uint64_t> partial_sums(const std::vector<ChunkedWrite>& writes, std::vector<std::size_t>& first_part) {
  first_part.assign(writes.size() + 1, 0);
  for (std::size_t k = 0; k < writes.size(); ++k) first_part[k + 1] = first_part[k] + writes[k].geometry.chunks();
  std::vector<std::uint64_t> sums(3 * first_part.back(), 0);
  for (std::size_t k = 0; k < writes.size(); ++k) {
    const ChunkedWrite& w = writes[k];
    const ChunkGeometry& g = w.geometry;
    for_each_slice(g, w.ranges, [&](const ChunkSlice& s) {
      const fletcher32::Part p = fletcher32::part(w.data[s.range] + s.at, s.bytes(), s.bytes_after(g));
      std::uint64_t* into = &sums[3 * (first_part[k] + s.chunk)];
      into[0] += p.sum1;
      into[1] += p.sum2;
      into[2] += p.nonzero;
    });
  }
  return sums;
}

// Bytes this rank writes at a file offset.
struct Extent {
  std::uint64_t offset;
  const void* data;
  std::uint64_t bytes;
};

// What this rank writes, in file order: its pieces, and the padding and checksum of each chunk
// whose last element it holds (kept in `checksums` and `zeros`).
std::vector<Extent> extents_to_write(const std::vector<ChunkedWrite>& writes, const std::vector<std::uint64_t>& sums,
                                     const std::vector<std::size_t>& first_part,
                                     std::vector<std::array<unsigned char, 4>>& checksums,
                                     std::vector<unsigned char>& zeros) {
  std::size_t owned = 0;
  std::uint64_t most_padding = 0;
  for (const ChunkedWrite& w : writes)
    for_each_slice(w.geometry, w.ranges, [&](const ChunkSlice& s) {
      if (s.end != w.geometry.chunk_end(s.chunk)) return;
      ++owned;
      most_padding = std::max(most_padding, s.bytes_after(w.geometry));
    });
  checksums.resize(owned);  // not to move again: extents point into it
  zeros.assign(most_padding, 0);
  std::vector<Extent> extents;
  std::size_t next = 0;
  for (std::size_t k = 0; k < writes.size(); ++k) {
    const ChunkedWrite& w = writes[k];
    const ChunkGeometry& g = w.geometry;
    for_each_slice(g, w.ranges, [&](const ChunkSlice& s) {
      const std::uint64_t chunk_at = w.chunk_offsets[s.chunk];
      extents.push_back({chunk_at + s.offset_in_chunk(g), w.data[s.range] + s.at, s.bytes()});
      if (s.end != g.chunk_end(s.chunk)) return;
      const std::uint64_t padding = s.bytes_after(g);
      if (padding > 0) extents.push_back({chunk_at + s.offset_in_chunk(g) + s.bytes(), zeros.data(), padding});
      const std::uint64_t* p = &sums[3 * (first_part[k] + s.chunk)];
      store_little_endian(fletcher32::value({p[0] % 65535, p[1] % 65535, p[2]}), checksums[next].data());
      extents.push_back({chunk_at + g.chunk_bytes(), checksums[next++].data(), 4});
    });
  }
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
  return extents;
}

// Writes exactly `bytes` at `offset`.
void write_fully(int fd, const void* data, std::uint64_t bytes, std::uint64_t offset, const char* how) {
  const auto* at = static_cast<const unsigned char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, at, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error(std::string("cannot write (") + how + ") " + std::to_string(bytes) + " bytes at offset " +
                  std::to_string(offset) + ": " + (n < 0 ? errno_text() : "nothing written"));
    at += n;
    bytes -= static_cast<std::uint64_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
}

// Copies file bytes [from, to) of the sorted, contiguous extents[first, last) into `into`.
void gather(const std::vector<Extent>& extents, std::size_t first, std::size_t last, std::uint64_t from,
            std::uint64_t to, unsigned char* into) {
  auto e = std::upper_bound(extents.begin() + static_cast<std::ptrdiff_t>(first),
                            extents.begin() + static_cast<std::ptrdiff_t>(last), from,
                            [](std::uint64_t at, const Extent& x) { return at < x.offset; });
  --e;  // the extent that holds `from`
  while (from < to) {
    const std::uint64_t skip = from - e->offset;
    const std::uint64_t n = std::min(e->bytes - skip, to - from);
    std::memcpy(into, static_cast<const unsigned char*>(e->data) + skip, n);
    into += n;
    from += n;
    ++e;
  }
}

// One rank's writes into the file: the whole pages inside each contiguous run of its extents
// with O_DIRECT through an aligned staging buffer, the partial pages at the ends of a run (which
// it may share with a neighbour or with HDF5's metadata) through the page cache.
//
// Why: on the machines these checkpoints were measured on (a VM whose free memory goes back to
// the host), putting 1.36 GB into the page cache cost 2.5-4 s of kernel time when the memory had
// been free for more than about two seconds and 0.3-0.5 s when it had just been freed
// (docs/benchmarks.md); every checkpoint after the first of a run met the slow case. O_DIRECT
// moves the bytes from the staging buffer to the device without new page-cache memory. A page is
// written either directly (whole, by the one rank whose run covers it) or through the cache,
// never both, so the two paths cannot overwrite each other's bytes.
class RankWriter {
 public:
  static constexpr std::uint64_t kPage = 4096;

  RankWriter(const std::string& path, const WriteOptions& options) : path_(path), stage_bytes_(options.stage_bytes) {
    try {
      open_files(options);
    } catch (...) {
      release();  // a throwing constructor runs no destructor
      throw;
    }
  }
  RankWriter(const RankWriter&) = delete;
  RankWriter& operator=(const RankWriter&) = delete;
  ~RankWriter() { release(); }

  // `extents` sorted by file offset, disjoint.
  void write(const std::vector<Extent>& extents) {
    if (direct_ < 0) {
      for (const Extent& e : extents) write_fully(buffered_, e.data, e.bytes, e.offset, "through the page cache");
      return;
    }
    for (std::size_t first = 0; first < extents.size();) {
      std::size_t last = first + 1;
      std::uint64_t end = extents[first].offset + extents[first].bytes;
      while (last < extents.size() && extents[last].offset == end) end += extents[last++].bytes;
      write_run(extents, first, last, extents[first].offset, end);
      first = last;
    }
  }

  // Every rank flushes what it wrote: on a parallel file system a rank's data sits in its own
  // node's cache, which the committing rank's fsync does not reach.
  void sync() {
    if (::fsync(buffered_) != 0) throw Error("cannot flush " + path_ + ": " + errno_text());
  }

  // Close reports what a network file system may only report then.
  void close() {
    for (int* fd : {&direct_, &buffered_}) {
      if (*fd < 0) continue;
      const int status = ::close(*fd);
      *fd = -1;
      if (status != 0) throw Error("cannot close " + path_ + ": " + errno_text());
    }
  }

 private:
  void open_files(const WriteOptions& options) {
    if (stage_bytes_ == 0 || stage_bytes_ % kPage != 0)
      throw Error("staging size " + std::to_string(stage_bytes_) + " is not a multiple of " + std::to_string(kPage));
    buffered_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (buffered_ < 0) throw Error("cannot open " + path_ + " for writing: " + errno_text());
    if (options.direct) {
      direct_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT);
      // A file system without O_DIRECT (tmpfs, some FUSE) says EINVAL: everything goes through
      // the page cache then.
      if (direct_ < 0 && errno != EINVAL) throw Error("cannot open " + path_ + " for direct writes: " + errno_text());
    }
    if (direct_ >= 0) {
      stage_ = static_cast<unsigned char*>(std::aligned_alloc(kPage, stage_bytes_));
      if (!stage_) throw Error("cannot allocate " + std::to_string(stage_bytes_) + " bytes to stage direct writes");
    }
  }

  void release() {
    std::free(stage_);
    stage_ = nullptr;
    for (int* fd : {&direct_, &buffered_}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
  }

  void write_run(const std::vector<Extent>& extents, std::size_t first, std::size_t last, std::uint64_t begin,
                 std::uint64_t end) {
    const std::uint64_t body_begin = (begin + kPage - 1) / kPage * kPage, body_end = end / kPage * kPage;
    if (body_begin >= body_end) {  // no whole page
      write_cached(extents, first, last, begin, end);
      return;
    }
    write_cached(extents, first, last, begin, body_begin);
    for (std::uint64_t at = body_begin; at < body_end; at += stage_bytes_) {
      const std::uint64_t to = std::min(body_end, at + stage_bytes_);
      gather(extents, first, last, at, to, stage_);
      write_direct(stage_, to - at, at);
    }
    write_cached(extents, first, last, body_end, end);
  }

  void write_cached(const std::vector<Extent>& extents, std::size_t first, std::size_t last, std::uint64_t from,
                    std::uint64_t to) {
    if (from >= to) return;
    unsigned char page[kPage];
    gather(extents, first, last, from, to, page);
    write_fully(buffered_, page, to - from, from, "through the page cache");
  }

  void write_direct(const unsigned char* data, std::uint64_t bytes, std::uint64_t offset) {
    while (bytes > 0) {
      const ssize_t n = ::pwrite(direct_, data, bytes, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EINVAL) {
        // The file system wants a coarser alignment than a page: these whole pages are this
        // rank's alone, so the page cache may take them.
        write_fully(buffered_, data, bytes, offset, "through the page cache");
        return;
      }
      if (n <= 0)
        throw Error("cannot write (direct) " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                    ": " + (n < 0 ? errno_text() : "nothing written"));
      // A short direct write ends on a block boundary; what is left stays aligned.
      data += n;
      bytes -= static_cast<std::uint64_t>(n);
      offset += static_cast<std::uint64_t>(n);
    }
  }

  std::string path_;
  std::uint64_t stage_bytes_;
  int buffered_ = -1, direct_ = -1;
  unsigned char* stage_ = nullptr;
};

}  // namespace

void write_chunks(const std::string& path, const std::vector<ChunkedWrite>& writes, MPI_Comm comm, PhaseLog* log,
                  const WriteOptions& options) {
  PhaseLog unused;
  PhaseLog& phases = log ? *log : unused;
  std::vector<std::size_t> first_part;
  std::vector<std::uint64_t> sums = partial_sums(writes, first_part);
  reduce_each(std::span<std::uint64_t>(sums), Reduction::sum, comm);
  std::vector<std::array<unsigned char, 4>> checksums;
  std::vector<unsigned char> zeros;
  const std::vector<Extent> extents = extents_to_write(writes, sums, first_part, checksums, zeros);
  phases.mark("checksums");

  // From here on each rank works alone until the agreement at the end: a rank that fails cannot
  // leave another waiting in a collective.
  std::string problem;
  try {
    RankWriter writer(path, options);
    phases.mark("open");
    writer.write(extents);
    phases.mark("write");
    writer.sync();
    phases.mark("file_sync");
    writer.close();
  } catch (const Error& e) {
    problem = e.what();
  }
  agree_or_throw(comm, problem);
  phases.mark("close");
}

void read_chunks(const std::string& path, const ChunkedRead& read) {
  const ChunkGeometry& g = read.geometry;
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw Error("cannot open: " + errno_text());
  std::vector<unsigned char> scratch(g.stored_bytes());
  std::uint64_t scratch_chunk = UINT64_MAX;  // the verified chunk scratch holds
  auto where = [&](std::uint64_t c) {
    return "dataset '/" + read.name + "' chunk " + std::to_string(c) + " (elements " + std::to_string(c * g.chunk) +
           "-" + std::to_string(g.chunk_end(c) - 1) + ", file offset " + std::to_string(read.chunk_offsets[c]) + ")";
  };
  auto verify = [&](std::uint64_t c, const void* data, const unsigned char* stored) {
    const std::uint32_t expected = little_endian_u32(stored), computed = fletcher32::of(data, g.chunk_bytes());
    if (expected != computed) {
      char detail[96];
      std::snprintf(detail, sizeof detail, " (stored %08x, computed %08x)", expected, computed);
      throw Error(where(c) + ": Fletcher32 checksum mismatch" + detail + ": damaged data");
    }
  };
  for_each_slice(g, read.ranges, [&](const ChunkSlice& s) {
    float* into = read.into[s.range] + s.at;
    const std::uint64_t chunk_at = read.chunk_offsets[s.chunk];
    if (s.bytes() == g.chunk_bytes()) {
      // A whole chunk: straight into place, its checksum beside it.
      unsigned char stored[4];
      iovec iov[2] = {{into, g.chunk_bytes()}, {stored, 4}};
      if (!read_fully(fd.get(), iov, 2, chunk_at, where(s.chunk)))
        throw Error(where(s.chunk) + ": the file ends inside it (truncated?)");
      verify(s.chunk, into, stored);
      return;
    }
    if (scratch_chunk != s.chunk) {
      iovec iov[1] = {{scratch.data(), scratch.size()}};
      if (!read_fully(fd.get(), iov, 1, chunk_at, where(s.chunk)))
        throw Error(where(s.chunk) + ": the file ends inside it (truncated?)");
      verify(s.chunk, scratch.data(), scratch.data() + g.chunk_bytes());
      scratch_chunk = s.chunk;
    }
    std::memcpy(into, scratch.data() + s.offset_in_chunk(g), s.bytes());
  });
}

}  // namespace st::h5
