#pragma once
// What is wrong, if anything, with a file the program is about to read (a deck, a data set, a
// checkpoint, a topology file), found before the reader meets it: a reader that meets a
// directory or an empty file reports something else (a mapping error, a missing key, a damaged
// file), far from the cause.
#include <string>

namespace st {

enum class FileProblem { none, missing, unreadable, directory, not_regular, empty };

struct FileCheck {
  FileProblem problem = FileProblem::none;
  std::string reason;  // "" when fine; else the system's words ("No such file or directory",
                       // "Permission denied") or "is a directory, not a file", "is empty", ...
  explicit operator bool() const { return problem != FileProblem::none; }
};

// Whether `path` is a regular, non-empty file this process can open for reading.
FileCheck check_input_file(const std::string& path);

// The problem as one sentence naming the file, "" when there is none:
//   cannot open data file 'x': No such file or directory
//   data file 'x' is a directory, not a file
// `what` names the kind of file ("deck file", "data file", "topology file").
std::string input_file_message(const std::string& what, const std::string& path, const FileCheck& check);
std::string input_file_message(const std::string& what, const std::string& path);

// "" when `dir` exists or can be created and a file can be created in it (what a run does first
// there), else why not in the system's words, or "is not a directory". One process. Directories
// it had to create are removed again, so that a check leaves nothing behind.
std::string writable_directory_problem(const std::string& dir);

}  // namespace st
