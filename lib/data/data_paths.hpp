#pragma once
// The files a deck's data.path or data.val_path names: each entry a file or a glob, in the
// order given; a glob's matches in byte order of their names (llm.c's fineweb_train_000001.bin,
// ...: the order of the shard numbers), so the order never depends on the machine or the ranks.
#include <mpi.h>

#include <string>
#include <vector>

namespace st {

// Throws Error naming the key and the entry: a glob that matches nothing, a directory, a file
// named twice. Entries without * ? [ are taken as they are (opening them reports a missing file).
std::vector<std::string> expand_data_paths(const std::vector<std::string>& entries, const std::string& key);

// Rank 0 expands, every rank gets its list, so all read the same files in the same order even
// where a file system shows ranks different directory listings. Collective; errors on all ranks.
std::vector<std::string> expand_data_paths(const std::vector<std::string>& entries, const std::string& key,
                                           MPI_Comm comm);

}  // namespace st
