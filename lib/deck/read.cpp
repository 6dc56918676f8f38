#include "deck/read.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "comm/agree.hpp"
#include "comm/values.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"

namespace st {

std::string read_deck_text(const std::string& path, MPI_Comm comm) {
  std::string text;
  // Rank 0 reads; a problem there ends every rank together, then the text goes to all.
  agreed_on_root(comm, [&] {
    // A pipe is a deck too (`shardtrain run <(make_deck)`); a directory or an empty file is not.
    const FileCheck check = check_input_file(path);
    if (check && check.problem != FileProblem::not_regular) throw Error(input_file_message("deck file", path, check));
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("cannot open deck file '" + path + "': " + std::strerror(errno));
    std::ostringstream buffer;
    buffer << in.rdbuf();
    text = buffer.str();
    if (in.bad()) throw Error("cannot read deck file '" + path + "'");
    if (text.empty()) throw Error("deck file '" + path + "' is empty");
  });
  broadcast(text, 0, comm);
  return text;
}

}  // namespace st
