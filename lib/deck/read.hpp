#pragma once
#include <mpi.h>

#include <string>

namespace st {

// Rank 0 reads the deck and broadcasts its bytes; a file that cannot be read is an error on
// every rank (scope: all ranks), so no rank goes on alone.
std::string read_deck_text(const std::string& path, MPI_Comm comm);

}  // namespace st
