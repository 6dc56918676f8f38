#pragma once
// The run directory: resolved deck, log and metrics of one run (written by rank 0).
#include <fstream>
#include <string>

#include "deck/config.hpp"

namespace st {

// run.out_dir with {deck} replaced by the deck's file name without extension.
std::string resolve_out_dir(const Config& config);

class RunDirectory {
 public:
  // Creates the directory (rank 0 only; other ranks get an inactive object). A resumed run
  // appends to train.log and metrics.jsonl.
  RunDirectory(const Config& config, bool active, bool append = false);
  bool active() const { return active_; }
  const std::string& path() const { return path_; }
  // Appends a line to train.log (and flushes: a killed job keeps what it printed).
  void log(const std::string& line);
  // Appends one JSON object per line to metrics.jsonl.
  void metric(const std::string& json_object);

 private:
  bool active_;
  std::string path_;
  std::ofstream log_, metrics_;
};

}  // namespace st
