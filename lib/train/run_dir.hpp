#pragma once
// The run directory: resolved deck, log and metrics of one run (written by rank 0).
#include <mpi.h>

#include <fstream>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "ckpt/catalogue.hpp"
#include "deck/config.hpp"

namespace st {

// The run directory and the checkpoint directory a deck names (resolve_out_dir, checkpoint_dir_of)
// are in ckpt/catalogue.hpp, with the other answers to "where are the checkpoints".

// "" when the run directory and the checkpoint directory can be created and written; else why
// not, naming the directory and the key the user set (run.out_dir when checkpoint.dir is not
// set). One process; `run` and `check` ask before anything is trained.
std::string run_directories_problem(const Config& config);
// The same, asked by rank 0 and answered on every rank: throws Error (all ranks) naming the deck.
void require_run_directories(const Config& config, MPI_Comm comm);

class RunDirectory {
 public:
  // Creates the directory (rank 0 only; other ranks get an inactive object). A resumed run
  // appends to train.log and metrics.jsonl; a run from step 0 keeps an earlier run's as
  // train.<N>.log and metrics.<N>.jsonl (the first free N) and says so in kept_note().
  RunDirectory(const Config& config, bool active, bool append = false);
  bool active() const { return active_; }
  // "" or what became of an earlier run's log and metrics.
  const std::string& kept_note() const { return kept_note_; }
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
  std::string kept_note_;
};

}  // namespace st
