#include "train/run_dir.hpp"

#include <filesystem>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/agree.hpp"
#include "comm/group.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/json_text.hpp"
#include "core/text.hpp"
#include "deck/parse.hpp"

namespace st {

std::string run_directories_problem(const Config& config) {
  // Both directories are checked, so that a job fixed after one message does not fail on the next.
  std::vector<std::string> problems;
  const std::string out = resolve_out_dir(config);
  const std::string out_problem = writable_directory_problem(out);
  if (!out_problem.empty())
    problems.push_back("cannot write in run directory '" + out + "' (run.out_dir): " + out_problem +
                       "; set run.out_dir to a directory this job can write");
  const std::string dir = checkpoint_dir_of(config);
  if (config.checkpoint.dir.empty()) {
    // Under run.out_dir: a problem of its own only where the run directory itself is fine.
    if (const std::string why = out_problem.empty() ? writable_directory_problem(dir) : ""; !why.empty())
      problems.push_back("cannot write in '" + dir + "', where checkpoints go (run.out_dir's checkpoints/): " + why +
                         "; set checkpoint.dir to a directory this job can write");
  } else if (const std::string why = writable_directory_problem(dir); !why.empty()) {
    problems.push_back("cannot write in checkpoint directory '" + dir + "' (checkpoint.dir): " + why +
                       "; set checkpoint.dir to a directory this job can write");
  }
  return join(problems, "\n");
}

void require_run_directories(const Config& config, MPI_Comm comm) {
  std::string problem = group_rank(comm) == 0 ? run_directories_problem(config) : std::string();
  if (!problem.empty()) problem = config.deck_path + ": " + problem;
  agree_or_throw(comm, problem);
}

namespace {

// The first N for which neither train.<N>.log nor metrics.<N>.jsonl exists in `dir`.
int first_free_number(const std::string& dir) {
  for (int n = 1;; ++n) {
    std::error_code ec;
    const std::string k = std::to_string(n);
    if (!std::filesystem::exists(dir + "/train." + k + ".log", ec) &&
        !std::filesystem::exists(dir + "/metrics." + k + ".jsonl", ec))
      return n;
  }
}

bool non_empty(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) > 0;
}

}  // namespace

RunDirectory::RunDirectory(const Config& config, bool active, bool append)
    : active_(active), path_(resolve_out_dir(config)) {
  if (!active_) return;
  std::error_code ec;
  std::filesystem::create_directories(path_, ec);
  if (ec) throw Error("cannot create run directory '" + path_ + "' (run.out_dir): " + ec.message());
  {
    std::ofstream deck(path_ + "/deck.toml");
    deck << config.deck_text;
    std::ofstream resolved(path_ + "/resolved.toml");
    resolved << resolved_deck_text(config);
    if (!deck || !resolved) throw Error("cannot write the deck into run directory '" + path_ + "'");
  }
  // A run from step 0 writes a log of its own; an earlier run's stays beside it.
  const std::string log_path = path_ + "/train.log", metrics_path = path_ + "/metrics.jsonl";
  if (!append && (non_empty(log_path) || non_empty(metrics_path))) {
    const std::string k = std::to_string(first_free_number(path_));
    std::vector<std::string> kept;
    for (const auto& [from, to] :
         {std::pair{log_path, "train." + k + ".log"}, std::pair{metrics_path, "metrics." + k + ".jsonl"}}) {
      if (!std::filesystem::exists(from, ec)) continue;
      std::filesystem::rename(from, path_ + "/" + to, ec);
      if (ec) throw Error("cannot keep the earlier run's " + from + " as " + to + ": " + ec.message());
      kept.push_back(std::filesystem::path(from).filename().string() + " as " + to);
    }
    kept_note_ = "run directory " + path_ + " held an earlier run's log: kept " + join(kept, " and ") +
                 " (a run from step 0 starts its own; a resumed run appends)";
  }
  const auto mode = append ? std::ios::app : std::ios::trunc;
  log_.open(path_ + "/train.log", mode);
  metrics_.open(path_ + "/metrics.jsonl", mode);
  if (!log_ || !metrics_) throw Error("cannot open train.log / metrics.jsonl in '" + path_ + "'");
}

void RunDirectory::log(const std::string& line) {
  if (!active_) return;
  log_ << line << '\n';
  log_.flush();
}

void RunDirectory::metric(const nlohmann::ordered_json& fields) {
  if (!active_) return;
  ST_REQUIRE(fields.is_object(), "a metrics line is a JSON object");
  // Every line says when it was written: "time" (UTC, ISO 8601) first.
  nlohmann::ordered_json line = {{"time", utc_timestamp()}};
  line.update(fields);
  metrics_ << json_text(line) << '\n';
  metrics_.flush();
}

}  // namespace st
