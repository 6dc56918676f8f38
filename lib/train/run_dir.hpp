#pragma once
// The run directory: resolved deck, log and metrics of one run (written by rank 0).
#include <fstream>
#include <string>

#include <nlohmann/json_fwd.hpp>

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
  // Appends `fields` (a JSON object) as one line to metrics.jsonl, after a "time" field; see
  // json_text for what becomes of NaN and of bytes that are not UTF-8.
  void metric(const nlohmann::ordered_json& fields);

 private:
  bool active_;
  std::string path_;
  std::ofstream log_, metrics_;
};

}  // namespace st
