#pragma once
// Writing llm.c token files from many ranks at once: each rank's tokens, in rank order, go
// straight to their place in the files through MPI-IO, so no rank holds the whole output.
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace st {

struct WrittenShard {
  std::string path;
  std::uint64_t tokens = 0;
};

// shard_tokens == 0: one file, `path`. Otherwise files of shard_tokens tokens (the last may be
// shorter) named after `path` with _000000, _000001, ... before its extension (out.bin ->
// out_000000.bin), as llm.c's fineweb_train_000001.bin. Each file is written under a temporary
// name and renamed when complete. Collective; throws Error naming the file on failure.
// token_bytes: 2 writes uint16 tokens under llm.c's GPT-2 header (magic 20240520, version 1;
// every id must be below 65536), 4 writes uint32 under its Llama 3 header (20240801, version 7).
std::vector<WrittenShard> write_token_shards(const std::string& path, const std::vector<std::uint32_t>& local,
                                             std::size_t token_bytes, std::uint64_t shard_tokens, MPI_Comm comm);

// The name of shard `index` of `path` (as above).
std::string token_shard_name(const std::string& path, std::size_t index);

}  // namespace st
