#pragma once
// A fixture for tests that write files: a directory of their own, made before each test and
// removed after it (named by the process, so tests that ctest runs side by side do not meet).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace st {

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("st_unit_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

}  // namespace st
