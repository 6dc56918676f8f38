#include "deck/read.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "core/input_file.hpp"

namespace st {

std::string read_deck_text(const std::string& path, MPI_Comm comm) {
  int rank = 0;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  std::string text, problem;
  if (rank == 0) {
    // A pipe is a deck too (`shardtrain run <(make_deck)`); a directory or an empty file is not.
    const FileCheck check = check_input_file(path);
    if (check && check.problem != FileProblem::not_regular) {
      problem = input_file_message("deck file", path, check);
    } else if (std::ifstream in(path, std::ios::binary); !in) {
      problem = "cannot open deck file '" + path + "': " + std::strerror(errno);
    } else {
      std::ostringstream buffer;
      buffer << in.rdbuf();
      text = buffer.str();
      if (in.bad()) problem = "cannot read deck file '" + path + "'";
      else if (text.empty()) problem = "deck file '" + path + "' is empty";
    }
  }
  // Broadcast the problem (if any) first so all ranks fail together, then the text.
  unsigned long long sizes[2] = {problem.size(), text.size()};
  ST_CHECK_MPI(MPI_Bcast(sizes, 2, MPI_UNSIGNED_LONG_LONG, 0, comm));
  problem.resize(sizes[0]);
  text.resize(sizes[1]);
  if (sizes[0] > 0) {
    ST_CHECK_MPI(MPI_Bcast(problem.data(), static_cast<int>(sizes[0]), MPI_CHAR, 0, comm));
    throw Error(problem, ErrorScope::all_ranks);
  }
  if (sizes[1] > 0) ST_CHECK_MPI(MPI_Bcast(text.data(), static_cast<int>(sizes[1]), MPI_CHAR, 0, comm));
  return text;
}

}  // namespace st
