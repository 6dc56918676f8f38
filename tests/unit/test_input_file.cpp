// The checks on files the program is about to read (core/input_file.hpp).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "temp_dir.hpp"
#include "core/input_file.hpp"

namespace st {
namespace {

class InputFileTest : public TempDirTest {
 protected:
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name)) << text;
    return path(name);
  }
};

TEST_F(InputFileTest, SaysWhatIsWrong) {
  const FileCheck good = check_input_file(write("good.txt", "x"));
  EXPECT_FALSE(good);
  EXPECT_EQ(input_file_message("data file", path("good.txt")), "");

  const FileCheck missing = check_input_file(path("missing.txt"));
  EXPECT_EQ(missing.problem, FileProblem::missing);
  EXPECT_EQ(input_file_message("data file", path("missing.txt")),
            "cannot open data file '" + path("missing.txt") + "': No such file or directory");
  // A path through a file is missing too.
  EXPECT_EQ(check_input_file(path("good.txt") + "/x").problem, FileProblem::missing);

  EXPECT_EQ(check_input_file(dir_.string()).problem, FileProblem::directory);
  EXPECT_EQ(input_file_message("deck file", dir_.string()), "deck file '" + dir_.string() + "' is a directory, not a file");

  EXPECT_EQ(input_file_message("topology file", write("empty.txt", "")), "topology file '" + path("empty.txt") + "' is empty");

  EXPECT_EQ(input_file_message("data file", "/dev/null"), "data file '/dev/null' is not a regular file (a character device)");
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  const FileCheck fifo = check_input_file(path("fifo"));  // must not block
  EXPECT_EQ(fifo.problem, FileProblem::not_regular);
  EXPECT_EQ(fifo.reason, "is not a regular file (a pipe)");
}

}  // namespace
}  // namespace st
