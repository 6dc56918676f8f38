#include "data/token_writer.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "comm/agree.hpp"
#include "comm/group.hpp"
#include "comm/mpi_check.hpp"
#include "comm/values.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"

namespace st {
namespace {

// An MPI-IO file opened by every rank of comm; closed (collectively) when it goes.
class SharedFile {
 public:
  SharedFile(const std::string& path, MPI_Comm comm) {
    const int code = MPI_File_open(comm, path.c_str(), MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &file_);
    std::string problem;
    if (code != MPI_SUCCESS) {
      file_ = MPI_FILE_NULL;
      problem = "cannot create token file '" + path + "': " + mpi_error_text(code);
    }
    agree_or_throw(comm, problem);
  }
  SharedFile(const SharedFile&) = delete;
  SharedFile& operator=(const SharedFile&) = delete;
  ~SharedFile() {
    if (file_ != MPI_FILE_NULL) MPI_File_close(&file_);
  }
  MPI_File get() const { return file_; }
  void close() { ST_CHECK_MPI(MPI_File_close(&file_)); }

 private:
  MPI_File file_ = MPI_FILE_NULL;
};

}  // namespace

std::string token_shard_name(const std::string& path, std::size_t index) {
  const std::filesystem::path p(path);
  char number[16];
  std::snprintf(number, sizeof number, "_%06zu", index);
  return (p.parent_path() / (p.stem().string() + number + p.extension().string())).string();
}

std::vector<WrittenShard> write_token_shards(const std::string& path, const std::vector<std::uint32_t>& local,
                                             std::size_t token_bytes, std::uint64_t shard_tokens, MPI_Comm comm) {
  ST_REQUIRE(token_bytes == 2 || token_bytes == 4, "token files hold uint16 or uint32 tokens");
  // uint16 files are written from a narrowed copy (the caller checked that the ids fit).
  const std::vector<std::uint16_t> narrow =
      token_bytes == 2 ? std::vector<std::uint16_t>(local.begin(), local.end()) : std::vector<std::uint16_t>{};
  const MPI_Datatype type = token_bytes == 2 ? MPI_UINT16_T : MPI_UINT32_T;
  const auto* data = token_bytes == 2 ? static_cast<const void*>(narrow.data()) : static_cast<const void*>(local.data());
  const int rank = group_rank(comm);
  const unsigned long long mine = local.size(), before = sum_before(mine, comm), total = sum_over(mine, comm);
  if (total == 0) throw Error("the text encodes to no tokens: nothing to write to '" + path + "'", ErrorScope::all_ranks);
  const std::uint64_t per_file = shard_tokens > 0 ? shard_tokens : total;
  if (per_file > static_cast<std::uint64_t>(INT_MAX))
    throw Error("'" + path + "' would hold " + std::to_string(per_file) +
                    " tokens, more than a token file's int32 header counts (2147483647): write shards "
                    "(--shard-tokens)",
                ErrorScope::all_ranks);

  std::vector<WrittenShard> written;
  const std::uint64_t files = (total + per_file - 1) / per_file;
  for (std::uint64_t k = 0; k < files; ++k) {
    const std::uint64_t first = k * per_file, last = std::min<std::uint64_t>(total, first + per_file);
    const std::string name = shard_tokens > 0 ? token_shard_name(path, k) : path;
    const std::string partial = name + ".partial";
    {
      SharedFile file(partial, comm);
      const auto header_bytes = static_cast<MPI_Offset>(kTokenFileHeaderInts * sizeof(std::int32_t));
      ST_CHECK_MPI(MPI_File_set_size(file.get(), header_bytes + static_cast<MPI_Offset>((last - first) * token_bytes)));
      if (rank == 0) {
        std::int32_t header[kTokenFileHeaderInts] = {};
        header[0] = token_bytes == 2 ? kTokenFileMagic : kTokenFileMagic32;
        header[1] = token_bytes == 2 ? kTokenFileVersion : kTokenFileVersion32;
        header[2] = static_cast<std::int32_t>(last - first);
        ST_CHECK_MPI(MPI_File_write_at(file.get(), 0, header, static_cast<int>(kTokenFileHeaderInts), MPI_INT32_T,
                                       MPI_STATUS_IGNORE));
      }
      // This rank's tokens that fall in this file, in pieces MPI's int counts can hold.
      std::uint64_t from = std::max<std::uint64_t>(first, before);
      const std::uint64_t to = std::min<std::uint64_t>(last, before + mine);
      while (from < to) {
        const std::uint64_t n = std::min<std::uint64_t>(to - from, 1u << 30);
        const MPI_Offset at = header_bytes + static_cast<MPI_Offset>((from - first) * token_bytes);
        const auto* source = static_cast<const char*>(data) + (from - before) * token_bytes;
        ST_CHECK_MPI(MPI_File_write_at(file.get(), at, source, static_cast<int>(n), type, MPI_STATUS_IGNORE));
        from += n;
      }
      file.close();
    }
    std::string problem;
    if (rank == 0 && std::rename(partial.c_str(), name.c_str()) != 0)
      problem = "cannot rename '" + partial + "' to '" + name + "': " + std::strerror(errno);
    agree_or_throw(comm, problem);
    written.push_back({name, last - first});
  }
  return written;
}

}  // namespace st
