#include "ckpt/locate.hpp"

#include <filesystem>

#include "ckpt/read.hpp"
#include "ckpt/verify.hpp"
#include "comm/agree.hpp"
#include "comm/group.hpp"
#include "comm/values.hpp"
#include "core/error.hpp"
#include "core/text.hpp"

namespace st {
namespace {

namespace fs = std::filesystem;

// Rank 0's list on every rank: the ranks of a job need not see a shared directory alike at the
// same instant, and they must try the same files in the same order.
std::vector<std::string> shared_list(std::vector<std::string> list, MPI_Comm comm) {
  std::string joined;
  for (const std::string& item : list) joined += item + '\0';
  broadcast(joined, 0, comm);
  list.clear();
  for (std::size_t at = 0; at < joined.size();) {
    const std::size_t end = joined.find('\0', at);
    list.push_back(joined.substr(at, end - at));
    at = end + 1;
  }
  return list;
}

// Reads the candidate's header, then tries it. "" when it passes; else why not, and whether it
// holds another model than `shape` (when given).
struct Verdict {
  std::string problem;
  bool other_model = false;
  CheckpointInfo info;
};
Verdict judge(const std::string& path, const ModelShape* shape, MPI_Comm comm, const TryCheckpoint& attempt) {
  Verdict v;
  try {
    v.info = read_checkpoint_info(path, comm);
  } catch (const Error& e) {
    v.problem = e.what();
    return v;
  }
  if (shape) {
    if (const std::string diffs = model_differences(v.info.shape, *shape); !diffs.empty()) {
      v.problem = "checkpoint " + path + ": holds a different model: " + diffs;
      v.other_model = true;
      return v;
    }
  }
  v.problem = attempt(path, v.info);
  return v;
}

// "--set model.n_layer=4 --set model.d_model=768": the deck keys that would give the checkpoint's
// model (the padded vocabulary follows from model.vocab_pad_to, which the file does not store).
std::string settings_for(const ModelShape& file, const ModelShape& deck) {
  std::vector<std::string> sets;
  for (const ModelKey& k : model_keys(file, deck))
    if (k.file != k.deck) sets.push_back(std::string("--set ") + k.key + "=" + k.file);
  return join(sets, " ");
}

}  // namespace

std::vector<std::string> LocatedCheckpoint::skip_notes(const std::string& verb) const {
  std::vector<std::string> notes;
  for (const SkippedCheckpoint& s : skipped)
    notes.push_back("skipping a checkpoint that cannot be " + verb + ": " + s.reason);
  return notes;
}

TryCheckpoint verifying(MPI_Comm comm) {
  return [comm](const std::string& path, const CheckpointInfo&) {
    return attempt_problem([&] { verify_checkpoint(path, comm); });
  };
}

LocatedCheckpoint locate_resume(const ResumeRequest& request, MPI_Comm comm, const TryCheckpoint& attempt) {
  LocatedCheckpoint located;
  if (request.resume == "none") return located;
  if (request.resume != "latest") {
    const Verdict v = judge(request.resume, &request.shape, comm, attempt);
    if (!v.problem.empty()) throw Error(v.problem + " (checkpoint.resume)", ErrorScope::all_ranks);
    located.path = request.resume;
    located.info = v.info;
    return located;
  }
  located.dir = request.dir;
  const std::vector<std::string> candidates =
      shared_list(group_rank(comm) == 0 ? checkpoint_candidates(request.dir) : std::vector<std::string>{}, comm);
  const ModelShape* other_shape = nullptr;
  CheckpointInfo other;
  for (const std::string& path : candidates) {
    Verdict v = judge(path, &request.shape, comm, attempt);
    if (v.problem.empty()) {
      located.path = path;
      located.info = std::move(v.info);
      return located;
    }
    if (v.other_model && !other_shape) {
      other = v.info;
      other_shape = &other.shape;
    }
    located.skipped.push_back({path, v.problem, v.other_model});
  }
  if (candidates.empty()) return located;  // a first run: nothing to resume yet

  // Checkpoints are here and none can be resumed: starting over would train beside them, and a
  // later resume or retention could not tell the two runs apart. The user decides.
  std::string text = "checkpoint.resume = \"latest\": none of the " + std::to_string(candidates.size()) +
                     " checkpoint(s) in " + request.dir + " can be resumed with this deck; nothing was trained or "
                     "written:";
  for (const SkippedCheckpoint& s : located.skipped) text += "\n  " + s.reason;
  text += "\nTo go on from ";
  if (other_shape)
    text += "them, give the checkpoints' model (" + settings_for(*other_shape, request.shape) +
            ", or the settings `shardtrain ckpt inspect " + request.dir + "` shows)";
  else
    text += "a damaged checkpoint, restore it or pass a good one as checkpoint.resume";
  text += "; to start a new run, set checkpoint.dir (or run.out_dir) to another directory, or set "
          "checkpoint.resume = \"none\" to start from step 0 in this one (its checkpoints are kept: retention "
          "deletes only the new run's own)";
  throw Error(request.deck_path + ": " + text, ErrorScope::all_ranks);
}

LocatedCheckpoint locate_for_reading(const std::string& given, MPI_Comm comm, const TryCheckpoint& attempt) {
  // Rank 0 says what the path is: "" a checkpoint file, else the directory whose candidates to try
  // (or an error).
  std::string dir, problem;
  std::vector<std::string> candidates;
  if (group_rank(comm) == 0) {
    const PathClass path = classify(given);
    if (path.kind == PathKind::missing)
      problem = "checkpoint " + given + ": no such file or directory";
    else if (path.kind == PathKind::other_dir || path.kind == PathKind::weights_dir)
      problem = "checkpoint " + given + ": a directory without checkpoints (no ckpt_<step>.h5 and no `latest`, "
                "neither in it, nor in " + given + "/checkpoints, nor in a checkpoint.dir its resolved.toml "
                "names); give a checkpoint file, its directory or a run "
                "directory";
    dir = path.dir;  // "" for a file
    if (!dir.empty()) candidates = checkpoint_candidates(dir);
  }
  agree_or_throw(comm, problem);
  broadcast(dir, 0, comm);
  candidates = shared_list(candidates, comm);

  LocatedCheckpoint located;
  located.dir = dir;
  if (dir.empty()) {  // a file: that one, or why not
    const Verdict v = judge(given, nullptr, comm, attempt);
    if (!v.problem.empty()) throw Error(v.problem, ErrorScope::all_ranks);
    located.path = given;
    located.info = v.info;
    return located;
  }
  for (const std::string& path : candidates) {
    Verdict v = judge(path, nullptr, comm, attempt);
    if (v.problem.empty()) {
      located.path = path;
      located.info = std::move(v.info);
      return located;
    }
    located.skipped.push_back({path, v.problem, false});
  }
  std::string text = "checkpoint " + given + ": none of the " + std::to_string(candidates.size()) +
                     " checkpoint(s) in " + dir + " can be read:";
  for (const SkippedCheckpoint& s : located.skipped) text += "\n  " + s.reason;
  throw Error(text, ErrorScope::all_ranks);
}

RetentionPlan plan_retention(const std::string& dir, const std::string& written, const CheckpointInfo& info,
                             int keep) {
  RetentionPlan plan;
  int kept = 1;  // `written`
  const std::string written_name = fs::path(written).filename().string();
  for (const CommittedCheckpoint& entry : committed_checkpoints(dir)) {
    const std::string name = fs::path(entry.path).filename().string();
    if (name == written_name) continue;
    CheckpointInfo other;
    try {
      other = read_checkpoint_header(entry.path);
    } catch (const Error& e) {
      plan.left_alone.push_back(name + " (cannot be read: " + e.what() + ")");
      continue;
    }
    if (other.run_id != info.run_id) {
      plan.left_alone.push_back(name + " (another run's" +
                                (other.run_id.empty() ? std::string(", written before runs had ids")
                                                      : ", run " + other.run_id) +
                                ")");
    } else if (const std::string diffs = model_differences(other.shape, info.shape); !diffs.empty()) {
      plan.left_alone.push_back(name + " (another model's: " + diffs + ")");
    } else if (kept < keep) {
      ++kept;
    } else {
      plan.remove.push_back(entry.path);
    }
  }
  return plan;
}

std::string set_aside_other_run(const std::string& path, const CheckpointInfo& info) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return "";
  std::string owner = "unknown";
  try {
    const CheckpointInfo there = read_checkpoint_header(path);
    if (there.run_id == info.run_id && model_differences(there.shape, info.shape).empty()) return "";
    if (!there.run_id.empty()) owner = there.run_id;
  } catch (const Error&) {
    // Unreadable: whose it is cannot be told, so it is kept too.
  }
  const fs::path at(path);
  const std::string stem = at.stem().string();  // ckpt_00000010
  std::string aside;
  for (int n = 0;; ++n) {
    std::string name = stem;
    name.append(".run-").append(owner);
    if (n > 0) name.append("-").append(std::to_string(n));
    name.append(".h5");
    aside = (at.parent_path() / name).string();
    if (!fs::exists(aside, ec)) break;
  }
  fs::rename(path, aside, ec);
  if (ec) throw Error("cannot move another run's " + path + " aside to " + aside + ": " + ec.message());
  return "another run's " + at.filename().string() + " (run " + owner + ") was in the way: kept as " +
         fs::path(aside).filename().string();
}

}  // namespace st
