#include "train/run_start.hpp"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>

#include "ckpt/checkpoint.hpp"
#include "ckpt/locate.hpp"
#include "ckpt/read.hpp"
#include "comm/agree.hpp"
#include "comm/group.hpp"
#include "comm/values.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "core/timer.hpp"
#include "deck/parse.hpp"
#include "weights/init_from.hpp"

namespace st {
namespace {

// What start_run works on.
struct Context {
  const Config& config;
  World& world;
  ShardedModel& net;
  const RunData& data;
  BatchLoader& train_loader;
  const std::string& checkpoint_dir;
};

// GPT-2 weights from a file (every rank reads them once rank 0 has checked the file, and keeps
// its part, as from a checkpoint, so any strategy and world size works), else the seed's
// initialisation; fresh optimizer state either way.
void start_from_initial_params(const Context& c, RunStart& start) {
  if (!c.config.model.init_from.empty()) {
    const InitialWeights initial =
        load_initial_weights(c.config.model.init_from, model_shape(c.config.model), c.world.comm());
    c.net.load_whole_params(initial.params);
    start.notes.push_back(initial.note);
    return;
  }
  c.net.init_params(static_cast<std::uint64_t>(c.config.run.seed));
}

// The deck that wrote a checkpoint, or nothing when it no longer parses here.
std::optional<Config> checkpoint_deck(const CheckpointInfo& info) {
  try {
    return parse_deck(info.settings_or_deck(), "the checkpoint's deck", {});
  } catch (const Error&) {
    return std::nullopt;
  }
}

// What a resumed run's deck changes in the tokens a step reads ("" when nothing): the steps
// before and after differ in size, so tokens seen are counted from the checkpoint on.
std::string batch_change(const Config& before, const Config& now, const CheckpointInfo& info) {
  if (before.data.global_batch == now.data.global_batch && before.model.seq_len == now.model.seq_len) return "";
  const std::int64_t tokens_now = now.data.global_batch * now.model.seq_len;
  return "the batch differs from the checkpoint's deck (data.global_batch " + std::to_string(before.data.global_batch) +
         " -> " + std::to_string(now.data.global_batch) + ", model.seq_len " + std::to_string(before.model.seq_len) +
         " -> " + std::to_string(now.model.seq_len) + "): its " + std::to_string(info.step) + " steps read " +
         std::to_string(info.tokens_seen) + " tokens; each step from here reads " + std::to_string(tokens_now);
}

// What a resumed run's deck changes in the learning-rate schedule of the deck that wrote the
// checkpoint ("" when nothing).
std::string schedule_change(const Config& before, const Config& now) {
  std::vector<std::string> changes;
  auto compare = [&](const char* key, const std::string& a, const std::string& b) {
    if (a != b) changes.push_back(std::string(key) + " " + a + " -> " + b);
  };
  compare("run.steps", std::to_string(before.run.steps), std::to_string(now.run.steps));
  compare("optimizer.lr", format_shortest(before.optimizer.lr), format_shortest(now.optimizer.lr));
  compare("optimizer.min_lr", format_shortest(before.optimizer.min_lr), format_shortest(now.optimizer.min_lr));
  compare("optimizer.warmup_steps", std::to_string(before.optimizer.warmup_steps),
          std::to_string(now.optimizer.warmup_steps));
  compare("optimizer.schedule", name_of(before.optimizer.schedule), name_of(now.optimizer.schedule));
  if (changes.empty()) return "";
  return "the learning-rate schedule differs from the checkpoint's deck (" + join(changes, ", ") +
         "): from here on the rate follows this deck's schedule, not the one the run began with";
}

LoaderPosition loader_position(const Context& c, const CheckpointInfo& info, const std::string& path,
                               std::vector<std::string>& notes) {
  LoaderPosition position{info.data_position, 0, 0};
  const TokenDataset& data = *c.data.splits.train.data;
  const Split& split = c.data.splits.train;
  if (!c.train_loader.sequential()) {
    // The batch count is the whole position; the file position it recorded says whether the
    // data are the checkpoint's.
    if (info.data_shard.empty()) return position;
    BatchLoader probe = c.train_loader;
    probe.seek(position);
    const std::size_t next = probe.next_start();
    const DataShard& shard = data.shards()[data.shard_of(next)];
    const bool same_file = shard.path == info.data_shard || std::filesystem::path(shard.path).filename() ==
                                                               std::filesystem::path(info.data_shard).filename();
    if (!same_file || static_cast<std::int64_t>(next - shard.begin) != info.data_shard_offset)
      notes.push_back("note: the checkpoint's next batch starts at token " + std::to_string(info.data_shard_offset) +
                              " of " + info.data_shard + ", this run's at token " + std::to_string(next - shard.begin) +
                              " of " + shard.path + ": the training data differ from the checkpoint's");
    return position;
  }
  const std::string where = "checkpoint " + path + ": ";
  if (info.data_shard.empty() || info.data_order != "sequential")
    throw Error(where + "data.order = \"sequential\" reads on from the data file and offset a checkpoint names, but this "
                        "one was written " +
                    (info.data_shard.empty() ? std::string("before checkpoints recorded them")
                                             : "with data.order = \"" + info.data_order + "\"") +
                    "; resume it with data.order = \"random\"",
                ErrorScope::all_ranks);
  // The file by its path, else by its name alone (the data moved to another directory).
  const auto& shards = data.shards();
  const DataShard* found = nullptr;
  for (const DataShard& s : shards)
    if (s.path == info.data_shard) found = &s;
  if (!found) {
    const std::string name = std::filesystem::path(info.data_shard).filename().string();
    int matches = 0;
    for (const DataShard& s : shards)
      if (std::filesystem::path(s.path).filename().string() == name) found = &s, ++matches;
    if (matches != 1) found = nullptr;
  }
  if (!found)
    throw Error(where + "the next batch starts at token " + std::to_string(info.data_shard_offset) + " of '" +
                    info.data_shard + "', a file data.path does not name (it names " + data.name() + ")",
                ErrorScope::all_ranks);
  const std::size_t at = found->begin + static_cast<std::size_t>(info.data_shard_offset);
  if (info.data_shard_offset < 0 || static_cast<std::size_t>(info.data_shard_offset) >= found->size || at < split.begin ||
      at >= split.end)
    throw Error(where + "the next batch starts at token " + std::to_string(info.data_shard_offset) + " of '" +
                    found->path + "', outside the training part of this data (" + std::to_string(found->size) +
                    " tokens in the file; training uses positions " + std::to_string(split.begin) + " to " +
                    std::to_string(split.end) + " of " + data.name() + ")",
                ErrorScope::all_ranks);
  position.offset = at - split.begin;
  position.epoch = info.data_epoch;
  return position;
}

// A new run's id: 16 hex digits from the system's entropy, made on rank 0 and shared.
std::string new_run_id(MPI_Comm comm) {
  std::string id;
  if (group_rank(comm) == 0) {
    std::random_device entropy;
    const std::uint64_t bits = (static_cast<std::uint64_t>(entropy()) << 32) ^ entropy();
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(bits));
    id = text;
  }
  broadcast(id, 0, comm);
  return id;
}

RunStart resume(const Context& c) {
  RunStart start;
  // A resumed run reads every parameter and optimizer value it holds: it initialises the model
  // only when there is nothing to resume from.
  const ResumeRequest request{c.config.checkpoint.resume, c.checkpoint_dir, model_shape(c.config.model),
                              c.config.deck_path};
  double seconds = 0;
  const LocatedCheckpoint located =
      locate_resume(request, c.world.comm(), [&](const std::string& path, const CheckpointInfo&) {
        return attempt_problem([&] {
          // The clock starts when every rank is here: start-up may end at different times on each.
          c.net.agreements().barrier("world (resume)");
          Stopwatch clock;
          read_checkpoint(path, request.shape, c.net.strategy(), c.world.comm());
          seconds = clock.seconds();
        });
      });
  start.notes = located.skip_notes();
  if (!located.found()) {
    // A checkpoint that failed part-way may have filled some of the state: all of it is set here.
    start_from_initial_params(c, start);
    start.run_id = new_run_id(c.world.comm());
    if (c.config.checkpoint.resume == "latest")
      start.notes.push_back("checkpoint.resume = \"latest\": no checkpoint in " + c.checkpoint_dir +
                            "; starting from step 0");
    return start;
  }
  const CheckpointInfo& info = located.info;
  start.step = info.step;
  start.run_id = info.run_id;
  char line[512];
  std::snprintf(line, sizeof line, "resumed from %s: step %lld, written by %lld rank(s) with %s (%s); read in %.2f s",
                located.path.c_str(), static_cast<long long>(info.step), static_cast<long long>(info.world_size),
                info.strategy.c_str(), info.precision.c_str(), seconds);
  start.notes.push_back(line);
  if (!c.config.model.init_from.empty())
    start.notes.push_back("model.init_from = \"" + c.config.model.init_from +
                          "\" is not read: the run goes on from the checkpoint");
  start.tokens_seen = info.tokens_seen;
  if (const std::optional<Config> before = checkpoint_deck(info)) {
    for (const std::string& changed : {schedule_change(*before, c.config), batch_change(*before, c.config, info)})
      if (!changed.empty()) start.notes.push_back(changed);
  }
  // After the choice: a data set that does not fit the checkpoint is the deck's problem, which an
  // older checkpoint would not solve.
  c.train_loader.seek(loader_position(c, info, located.path, start.notes));
  return start;
}

}  // namespace

RunStart start_run(const Config& config, World& world, ShardedModel& net, const RunData& data,
                   BatchLoader& train_loader, const std::string& checkpoint_dir) {
  return resume({config, world, net, data, train_loader, checkpoint_dir});
}

}  // namespace st
