#include "ckpt/catalogue.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <tuple>

#include "ckpt/h5.hpp"
#include "ckpt/read.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "deck/parse.hpp"

namespace st {
namespace {

namespace fs = std::filesystem;

// Where a run directory keeps its checkpoints unless checkpoint.dir says otherwise.
constexpr const char* kRunCheckpoints = "/checkpoints";

bool has_checkpoints(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && (fs::exists(dir + "/latest", ec) || !committed_checkpoints(dir).empty());
}

// The directory a run directory's checkpoints are in (its checkpoints/, or the checkpoint.dir its
// resolved.toml names), or "" when none holds a checkpoint or a `latest`.
std::string run_checkpoints(const std::string& run_dir) {
  if (has_checkpoints(run_dir + kRunCheckpoints)) return run_dir + kRunCheckpoints;
  // A run directory whose checkpoints went to a checkpoint.dir of their own: its resolved.toml
  // (written at the start of every run) says where.
  std::ifstream resolved(run_dir + "/resolved.toml");
  if (!resolved) return "";
  std::ostringstream text;
  text << resolved.rdbuf();
  try {
    const std::string dir = parse_deck(text.str(), run_dir + "/resolved.toml", {}).checkpoint.dir;
    if (!dir.empty() && has_checkpoints(dir)) return dir;
  } catch (const Error&) {
    // Not a deck this version reads: the directory is named as one without checkpoints.
  }
  return "";
}

}  // namespace

std::string checkpoint_name(std::int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "ckpt_%08lld.h5", static_cast<long long>(step));
  return name;
}

std::int64_t checkpoint_step_of(const std::string& filename) {
  static const std::regex pattern(R"(ckpt_(\d+)\.h5)");
  std::smatch m;
  if (!std::regex_match(filename, m, pattern)) return -1;
  return std::stoll(m[1].str());
}

std::string pointer_target(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec || size > 256) return "";
  std::ifstream in(path);
  std::string name;
  std::getline(in, name);
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  return checkpoint_step_of(name) >= 0 ? name : "";
}

std::string resolve_out_dir(const Config& config) {
  std::string out = config.run.out_dir;
  const std::string stem = fs::path(config.deck_path).stem().string();
  for (std::size_t at = out.find("{deck}"); at != std::string::npos; at = out.find("{deck}"))
    out.replace(at, 6, stem);
  return out;
}

std::string checkpoint_dir_of(const Config& config) {
  return config.checkpoint.dir.empty() ? resolve_out_dir(config) + kRunCheckpoints : config.checkpoint.dir;
}

std::vector<CommittedCheckpoint> committed_checkpoints(const std::string& dir) {
  std::vector<CommittedCheckpoint> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::int64_t step = checkpoint_step_of(entry.path().filename().string());
    if (step < 0) continue;
    std::error_code time_ec;
    const auto committed = fs::last_write_time(entry.path(), time_ec);
    found.push_back({entry.path().string(), step, time_ec ? fs::file_time_type::min() : committed});
  }
  // Newest commit first; the higher step first among equal times.
  std::sort(found.begin(), found.end(), [](const CommittedCheckpoint& a, const CommittedCheckpoint& b) {
    return std::tie(a.committed, a.step) > std::tie(b.committed, b.step);
  });
  return found;
}

std::vector<std::string> checkpoint_candidates(const std::string& dir) {
  std::vector<std::string> out;
  std::ifstream latest(dir + "/latest");
  std::string name;
  if (latest && std::getline(latest, name)) {
    while (!name.empty() && (name.back() == '\r' || name.back() == ' ')) name.pop_back();
    if (!name.empty()) out.push_back(dir + "/" + name);
  }
  for (const CommittedCheckpoint& entry : committed_checkpoints(dir))
    if (std::find(out.begin(), out.end(), entry.path) == out.end()) out.push_back(entry.path);
  return out;
}

PathClass classify(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return {PathKind::missing, ""};
  if (fs::is_directory(path, ec)) {
    if (has_checkpoints(path)) return {PathKind::checkpoint_dir, path};
    if (std::string dir = run_checkpoints(path); !dir.empty()) return {PathKind::run_dir, std::move(dir)};
    if (fs::exists(path + "/model.safetensors", ec) || fs::exists(path + "/model.safetensors.index.json", ec))
      return {PathKind::weights_dir, ""};
    return {PathKind::other_dir, ""};
  }
  if (!pointer_target(path).empty()) {
    const std::string dir = fs::path(path).parent_path().string();
    return {PathKind::pointer, dir.empty() ? "." : dir};
  }
  if (h5::has_hdf5_signature(path)) return {PathKind::checkpoint_file, ""};
  return {PathKind::weights_file, ""};
}

std::string checkpoint_path_problem(const std::string& path, bool resuming) {
  const FileCheck check = check_input_file(path);
  switch (check.problem) {
    case FileProblem::none: break;
    case FileProblem::missing: return "no such file";
    case FileProblem::unreadable: return "cannot be read: " + check.reason;
    case FileProblem::directory: {
      // A checkpoint directory, or a run directory (catalogue.hpp classify).
      const std::string where = classify(path).dir;
      const std::vector<std::string> found = where.empty() ? std::vector<std::string>{} : checkpoint_candidates(where);
      std::string text = "is a directory, not a checkpoint file: ";
      text += found.empty() ? "it holds no checkpoint (ckpt_<step>.h5)"
                            : "pass one of its checkpoints, e.g. " + found.front() + " (the newest)";
      if (resuming && !found.empty())
        text += ", or set checkpoint.resume = \"latest\" with checkpoint.dir = \"" + where + "\"";
      return text;
    }
    default: return check.reason + ", not a checkpoint";
  }
  if (const std::string named = pointer_target(path); !named.empty()) {
    const fs::path dir = fs::path(path).parent_path();
    return "is the pointer to the newest checkpoint, not a checkpoint: it names " + named + "; pass " +
           (dir / named).string() +
           (resuming ? ", or set checkpoint.resume = \"latest\" with checkpoint.dir = \"" +
                           (dir.empty() ? std::string(".") : dir.string()) + "\""
                     : "");
  }
  if (!h5::has_hdf5_signature(path)) return "is not an HDF5 file (it lacks HDF5's signature), so not a checkpoint";
  return "";
}

bool is_checkpoint(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  if (checkpoint_step_of(name) >= 0 || name == "latest") return true;
  const PathKind kind = classify(path).kind;
  if (kind == PathKind::pointer) return true;
  if (kind != PathKind::checkpoint_file) return false;
  try {
    read_checkpoint_header(path);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace st
