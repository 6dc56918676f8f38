// `shardtrain generate` and `shardtrain eval`: use a trained model. Both load a checkpoint onto
// this job's ranks with the deck it was trained with (stored in the checkpoint), sharded by its
// strategy or another given with --set, so a model too big for one rank loads on several.
#include "app/use_commands.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "ckpt/checkpoint.hpp"
#include "comm/agree.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "data/batches.hpp"
#include "data/data_paths.hpp"
#include "data/dataset.hpp"
#include "deck/parse.hpp"
#include "exec/device_choice.hpp"
#include "train/evaluate.hpp"
#include "train/sampler.hpp"
#include "train/sharded_model.hpp"
#include "train/run_data.hpp"
#include "train/threads.hpp"
#include "tokenizer/tokenizer.hpp"
#include "train/trainer.hpp"

namespace st::app {
namespace {

namespace fs = std::filesystem;

// The checkpoint file a path names: a checkpoint file itself, a checkpoint directory (the file
// its `latest` names) or a run directory (its checkpoints/latest).
std::string resolve_checkpoint(const std::string& given) {
  std::error_code ec;
  if (!fs::exists(given, ec)) throw Error("checkpoint " + given + ": no such file or directory", ErrorScope::all_ranks);
  if (!fs::is_directory(given, ec)) return given;
  for (const std::string& dir : {given, given + "/checkpoints"}) {
    std::ifstream latest(dir + "/latest");
    std::string name;
    if (latest && std::getline(latest, name) && !name.empty()) return dir + "/" + name;
  }
  throw Error("checkpoint " + given + ": a directory without a `latest` checkpoint (neither " + given +
                  "/latest nor " + given + "/checkpoints/latest); give a checkpoint file (ckpt_<step>.h5), its "
                  "directory, or a run directory",
              ErrorScope::all_ranks);
}

// A trained model on this job's ranks, and the deck it was trained with.
struct LoadedModel {
  std::string path;
  CheckpointInfo info;
  Config config;
  std::unique_ptr<ShardedModel> net;
};

// max_batch: sequences per forward pass; 0: the deck's micro-batch on this job.
LoadedModel load_model(const std::string& given, const std::vector<std::string>& overrides, World& world,
                       int max_batch) {
  LoadedModel m;
  m.path = resolve_checkpoint(given);
  m.info = read_checkpoint_info(m.path, world.comm());
  if (m.info.deck.empty())
    throw Error("checkpoint " + m.path + ": holds no deck; it was not written by shardtrain run", ErrorScope::all_ranks);
  m.config = parse_deck(m.info.deck, m.path + " (the deck stored in it)", overrides);
  ParallelConfig& p = m.config.parallel;
  // `auto` chose by the training job's machine: here, shard when there are several ranks.
  if (p.strategy == "auto") p.strategy = world.size() > 1 ? "zero3" : "ddp";
  apply_thread_count(choose_thread_count(static_cast<int>(m.config.run.threads), world.host_ranks()));
  const DeviceChoice device = choose_device(p.device, world.comm(), m.path);
  if (max_batch == 0)
    max_batch = static_cast<int>(
        plan_batches(m.config.data, m.config.model.seq_len, world.size(), m.config.deck_path).micro_batch);
  m.net = std::make_unique<ShardedModel>(m.config, world, make_execution(device, p.precision == "bf16"), max_batch,
                                         nullptr);
  read_checkpoint(m.path, gpt2_shape(m.config.model), m.net->strategy(), world.comm());
  return m;
}

// Whether a byte-tokenizer deck's tokens are bytes of text (rendered as text) or token ids: its
// first data file says, or, when the data are gone, the vocabulary.
bool bytes_are_tokens(const Config& config) {
  if (config.data.format != "auto") return config.data.format == "text";
  std::vector<std::string> files;
  try {
    files = expand_data_paths(config.data.path, "data.path");
  } catch (const Error&) {
  }
  std::int32_t magic = 0;
  if (!files.empty()) {
    std::ifstream file(files.front(), std::ios::binary);
    if (file.read(reinterpret_cast<char*>(&magic), sizeof magic)) return magic != kTokenFileMagic;
  }
  return config.model.vocab_size == 256;
}

// How the checkpoint's deck turns text into tokens (data.tokenizer), and whether its tokens are
// text at all (rendered as text, the prompt encoded) or token ids.
struct TextCodec {
  std::unique_ptr<Tokenizer> tokenizer;
  bool text = false;
};
TextCodec text_codec(const LoadedModel& m, World& world) {
  TextCodec codec;
  std::string problem;
  try {
    codec.tokenizer = make_tokenizer(m.config.data.tokenizer, m.config.data.tokenizer_files);
  } catch (const Error& e) {
    problem = "checkpoint " + m.path + ": its deck's data.tokenizer = \"" + m.config.data.tokenizer + "\": " +
              e.what() + " (--set data.tokenizer_files=... names them here)";
  }
  agree_or_throw(world.comm(), problem);
  codec.text = m.config.data.tokenizer != "byte" || bytes_are_tokens(m.config);
  return codec;
}

std::vector<int> parse_token_ids(const std::string& text, std::int64_t vocab) {
  std::vector<int> ids;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) {
    std::istringstream words(item);
    for (std::string word; words >> word;) {
      std::size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(word, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != word.size() || id < 0 || id >= vocab)
        throw Error("--prompt-tokens: '" + word + "' is not a token id (0 to " + std::to_string(vocab - 1) + ")",
                    ErrorScope::all_ranks);
      ids.push_back(static_cast<int>(id));
    }
  }
  return ids;
}

std::string json_ids(const std::vector<int>& ids, std::size_t from) {
  std::string out = "[";
  for (std::size_t i = from; i < ids.size(); ++i) {
    if (i > from) out += ',';
    out += std::to_string(ids[i]);
  }
  return out + "]";
}

}  // namespace

int generate_command(const GenerateRequest& r, World& world) {
  if (r.temperature <= 0) throw Error("--temperature must be above 0", ErrorScope::all_ranks);
  LoadedModel m = load_model(r.checkpoint, r.overrides, world, 1);
  const TextCodec codec = text_codec(m, world);
  std::vector<int> prompt;
  if (!r.prompt_tokens.empty()) {
    prompt = parse_token_ids(r.prompt_tokens, m.config.model.vocab_size);
  } else if (codec.text) {
    prompt = codec.tokenizer->encode(r.prompt);
    if (prompt.empty()) prompt.push_back(codec.tokenizer->document_start());
  } else {
    throw Error("checkpoint " + m.path + ": the model reads token ids (data.path is a token file): give the prompt "
                "as --prompt-tokens \"id id ...\"",
                ErrorScope::all_ranks);
  }
  if (prompt.empty()) throw Error("--prompt-tokens: no token ids given", ErrorScope::all_ranks);
  std::string json = "{\"checkpoint\":" + json_string(m.path) + ",\"step\":" + std::to_string(m.info.step) +
                     ",\"samples\":[";
  for (int i = 0; i < r.samples; ++i) {
    const std::uint64_t seed = r.seed + static_cast<std::uint64_t>(i);
    const std::vector<int> tokens =
        generate(m.net->model(), m.net->strategy(), prompt, r.tokens, {r.temperature, r.top_k, seed});
    if (!world.is_root()) continue;
    const std::string rendered = codec.text ? render_text(tokens, *codec.tokenizer) : render_ids(tokens);
    if (r.json) {
      json += std::string(i > 0 ? "," : "") + "{\"seed\":" + std::to_string(seed) +
              ",\"prompt_tokens\":" + json_ids(prompt, 0) + ",\"tokens\":" + json_ids(tokens, prompt.size()) +
              ",\"text\":" + json_string(rendered) + "}";
    } else {
      std::cout << "---- sample " << i + 1 << " of " << r.samples << " (seed " << seed << ") ----\n"
                << rendered << "\n";
    }
  }
  if (world.is_root()) {
    if (r.json) std::cout << json << "]}" << std::endl;
    else std::cout << "----" << std::endl;
  }
  return kExitOk;
}

int eval_command(const EvalRequest& r, World& world) {
  std::vector<std::string> overrides = r.overrides;
  if (!r.data.empty()) overrides.push_back("data.path=" + json_string(r.data));
  LoadedModel m = load_model(r.checkpoint, overrides, world, 0);
  const Config& c = m.config;
  // The deck's validation data (its split of data.path, or data.val_path), or all of another file.
  const RunData data = open_run_data(c, world.comm(), !r.data.empty());
  const Split& split = data.splits.val;
  const BatchPlan plan = plan_batches(c.data, c.model.seq_len, world.size(), c.deck_path);
  const std::int64_t batches = r.batches > 0 ? r.batches : c.run.eval_batches;
  BatchLoader loader(split, c.data.order, static_cast<std::uint64_t>(c.run.seed), kValStream, c.model.seq_len,
                     plan.global_batch, "validation");
  const double loss = mean_loss(*m.net, loader, plan, world.rank(), batches);
  if (!world.is_root()) return kExitOk;
  const std::string source = split.data->name() + (r.data.empty() ? " (validation split" : " (all") + ", tokens " +
                             std::to_string(split.begin) + " to " + std::to_string(split.end) + ")";
  if (r.json) {
    std::cout << "{\"checkpoint\":" << json_string(m.path) << ",\"step\":" << m.info.step << ",\"loss\":" << json_number(loss)
              << ",\"perplexity\":" << json_number(std::exp(loss)) << ",\"batches\":" << batches
              << ",\"sequences_per_batch\":" << plan.global_batch << ",\"seq_len\":" << plan.seq_len
              << ",\"data\":" << json_string(source) << "}" << std::endl;
  } else {
    char line[160];
    std::snprintf(line, sizeof line, "eval: loss %.6f, perplexity %.4f", loss, std::exp(loss));
    std::cout << line << " over " << batches << " batch(es) of " << plan.global_batch << " sequences of "
              << plan.seq_len << " tokens from " << source << "; checkpoint " << m.path << " (step " << m.info.step
              << ")" << std::endl;
  }
  return kExitOk;
}

}  // namespace st::app
