#pragma once
// Which checkpoint a command reads, decided in one place: `run` (checkpoint.resume), `check`
// (what run would do), `generate`, `eval` and `ckpt inspect` (a file, a checkpoint directory, a
// run directory or a `latest` pointer), and retention (which files of a directory are this run's
// to delete). So `check` names the checkpoint `run` resumes, and no command follows a `latest`
// that retention has left dangling.
//
// The order checkpoints are tried in: the one `latest` names (the last commit in the directory),
// then the others, most recently committed first. A checkpoint that cannot be read (damaged,
// truncated, missing) is skipped for the next; one of another model is skipped too, and when
// nothing fits a deck the run is refused rather than started over beside the checkpoints.
#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "ckpt/catalogue.hpp"
#include "ckpt/checkpoint.hpp"
#include "core/error.hpp"

namespace st {

// A checkpoint passed over, and why ("checkpoint PATH: ...").
struct SkippedCheckpoint {
  std::string path;
  std::string reason;
  bool other_model = false;  // it is readable but holds another model (else: damaged or missing)
};

struct LocatedCheckpoint {
  std::string path;  // "" when there is nothing to resume: start from step 0
  CheckpointInfo info;
  std::string dir;   // where `latest` and the candidates were looked for ("" for a named file)
  std::vector<SkippedCheckpoint> skipped;
  bool found() const { return !path.empty(); }
  // "skipping a checkpoint that cannot be <verb>: ..." lines, one per skipped file.
  std::vector<std::string> skip_notes(const std::string& verb = "resumed") const;
};

// How a candidate is tried, after its header was read: `run` reads it into the strategy, `check`,
// `inspect`, `generate` and `eval` verify every checksum. Returns "" when it is good, else why
// not; collective, with the same answer on every rank.
using TryCheckpoint = std::function<std::string(const std::string& path, const CheckpointInfo& info)>;
// "" when `attempt` returns, else the text of the Error it threw: how a try says the candidate will
// not do (a reader that agrees on its Error across ranks gives the same text on every rank).
template <class Attempt>
std::string attempt_problem(Attempt&& attempt) {
  try {
    attempt();
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}
// The try of the commands that read no model (`check`, `ckpt export`): every checksum verified
// over `comm` (verify_checkpoint), as a resume verifies what it reads.
TryCheckpoint verifying(MPI_Comm comm);

// What checkpoint.resume asks for: "none", "latest" (in `dir`) or a file.
struct ResumeRequest {
  std::string resume;
  std::string dir;  // the run's checkpoint directory
  ModelShape shape;  // the deck's model
  std::string deck_path;  // names the deck in messages
};

// The checkpoint a run resumes. "none": nothing. A named file: that one, or an Error (all ranks)
// saying why not. "latest": the first candidate of `dir` that holds the deck's model and passes
// `attempt`; nothing when `dir` holds no checkpoint; an Error (all ranks) when it holds
// checkpoints but none can be resumed, naming each with why and what to do, so that a changed
// deck never starts over beside (and later deletes) the run it was meant to continue.
// Collective.
LocatedCheckpoint locate_resume(const ResumeRequest& request, MPI_Comm comm, const TryCheckpoint& attempt);

// The checkpoint a path given to generate, eval or `ckpt inspect` stands for: a checkpoint file
// (that one, no fallback), a `latest` pointer, a checkpoint directory or a run directory (its
// checkpoints/): the first candidate that passes `attempt`. Throws Error (all ranks) naming the
// path when none does. Collective.
LocatedCheckpoint locate_for_reading(const std::string& given, MPI_Comm comm, const TryCheckpoint& attempt);

// What retention does after `written` was committed in `dir`: the checkpoints to delete (this
// run's, by commit time, past the newest `keep`, never `written`) and those it leaves alone,
// each with why: another run's (another run_id), another model's, or unreadable. One process
// (rank 0, after the commit).
struct RetentionPlan {
  std::vector<std::string> remove;
  std::vector<std::string> left_alone;
};
RetentionPlan plan_retention(const std::string& dir, const std::string& written, const CheckpointInfo& info, int keep);

// Before a checkpoint is committed under `path`: a file already there of another run (another
// run_id, another model, or unreadable) is renamed to ckpt_<step>.run-<id>.h5 rather than
// replaced, out of every command's way (no longer a ckpt_<step>.h5, it is never resumed or
// deleted) but kept. Returns what was done, or "" (nothing there, or this run's own file, which
// the commit replaces). Throws Error when the rename fails. One process.
std::string set_aside_other_run(const std::string& path, const CheckpointInfo& info);

}  // namespace st
