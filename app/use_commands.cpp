// `shardtrain generate` and `shardtrain eval`: use a trained model. Both load a checkpoint onto
// this job's ranks with the deck it was trained with (stored in the checkpoint), sharded by its
// strategy or another given with --set, so a model too big for one rank loads on several.
#include "app/use_commands.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/commands.hpp"
#include "ckpt/catalogue.hpp"
#include "ckpt/checkpoint.hpp"
#include "ckpt/locate.hpp"
#include "ckpt/read.hpp"
#include "comm/agree.hpp"
#include "core/error.hpp"
#include "core/json_text.hpp"
#include "core/text.hpp"
#include "data/batches.hpp"
#include "data/data_paths.hpp"
#include "data/dataset.hpp"
#include "deck/parse.hpp"
#include "exec/threads.hpp"
#include "parallel/plan.hpp"
#include "plan/fit.hpp"
#include "runtime/device_choice.hpp"
#include "tokenizer/tokenizer.hpp"
#include "train/evaluate.hpp"
#include "train/run_data.hpp"
#include "train/sampler.hpp"
#include "train/sharded_model.hpp"
#include "train/trainer.hpp"
#include "weights/gpt2_weights.hpp"
#include "weights/init_from.hpp"

namespace st::app {
namespace {

namespace fs = std::filesystem;

// Whether a path given to generate or eval names weights (an llm.c model file, a
// model.safetensors, a Llama's model.safetensors.index.json, or a directory holding one, and no
// checkpoints) rather than a checkpoint (an HDF5 file, a `latest` pointer, a checkpoint or run
// directory: ckpt/catalogue.hpp classify says which, ckpt/locate.hpp which checkpoint). A file is
// told by its first bytes (probe_weights), which also names what is wrong with one that is
// neither.
bool names_weights(const std::string& given) {
  const PathKind kind = classify(given).kind;
  if (kind == PathKind::weights_dir) return true;
  if (kind != PathKind::weights_file) return false;  // the locator names a path that is missing or holds nothing
  if (given.ends_with(".safetensors.index.json")) return true;  // a Llama's shards: probe_weights names what is wrong
  try {
    probe_weights(given);  // headers only; load_model reads the values once rank 0 has checked them
  } catch (const Error& e) {
    throw Error("checkpoint " + given + ": not an HDF5 checkpoint, nor weights (" + e.what() + ")",
                ErrorScope::all_ranks);
  }
  return true;
}

// A trained model on this job's ranks, and the deck it was trained with.
struct LoadedModel {
  std::unique_ptr<World> world;  // the job's ranks grouped into nodes as the deck says
  std::string path;
  bool weights = false;  // from a weights file: no training step, no deck of its own
  CheckpointInfo info;
  Config config;
  std::unique_ptr<ShardedModel> net;
  // "checkpoint PATH (step 120)" or "weights PATH": what the output names.
  std::string origin() const {
    return weights ? "weights " + path : "checkpoint " + path + " (step " + std::to_string(info.step) + ")";
  }
};

// The deck a weights file runs with: every model key from the file, the rest at their defaults
// (--set changes any). data.path is never read (eval takes --data), but a deck must name one.
std::string weights_deck(const std::string& path) {
  const std::string quoted = toml_string(path, "the weights file");
  return "[run]\nsteps = 1\n[model]\ninit_from = " + quoted + "\nfrom_file = true\n[data]\npath = " + quoted + "\n";
}

// GPT-2's vocabulary takes GPT-2's tokenizer (from the files tools/setup.sh installs) unless
// --set says otherwise.
void tokenizer_for_weights(Config& config) {
  if (config.model.vocab_size != 50257 || config.origin["data.tokenizer"] != "default") return;
  config.data.tokenizer = TokenizerKind::gpt2;
  if (config.data.tokenizer_files.empty()) config.data.tokenizer_files = {default_gpt2_files()};
}

// The model on this job's ranks, set up from `config`; its parameters are read by the caller.
void build_model(LoadedModel& m, World& world, int max_batch) {
  for (const std::string& note : fit_parallel_settings(m.config, world))
    if (world.is_root()) std::cerr << "note: " << note << "\n";
  ParallelConfig& p = m.config.parallel;
  apply_thread_count(choose_thread_count(static_cast<int>(m.config.run.threads), world.host_ranks()));
  const int node_ranks = deck_ranks_per_node(m.config, world.size());
  const DeviceChoice device = choose_device(p.device, world.comm(), m.path, node_ranks);
  m.world = std::make_unique<World>(world.comm(), node_ranks);
  if (const std::string note = fit_tensor_degree(m.config, *m.world); !note.empty() && m.world->is_root())
    std::cerr << "note: " << note << "\n";
  const int tensor = deck_tensor_degree(m.config, m.world->size(), m.world->local_size(), m.world->uniform());
  if (max_batch == 0)
    max_batch = static_cast<int>(
        plan_batches(m.config.data, m.config.model.seq_len, world.size() / tensor, m.config.deck_path).micro_batch);
  m.net = std::make_unique<ShardedModel>(m.config, *m.world, make_execution(device, p),
                                         max_batch, nullptr, ShardedModel::Use::inference);
}

// max_batch: sequences per forward pass; 0: the deck's micro-batch on this job.
LoadedModel load_model(const std::string& given, const std::vector<std::string>& overrides, World& world,
                       int max_batch) {
  LoadedModel m;
  if (names_weights(given)) {
    m.path = given;
    m.weights = true;
    m.config = parse_deck(weights_deck(m.path), m.path + " (weights: the deck's defaults)", overrides);
    resolve_init_from(m.config, world.comm());
    tokenizer_for_weights(m.config);
    build_model(m, world, max_batch);
    m.net->load_whole_params(load_initial_weights(m.path, model_shape(m.config.model), world.comm()).params);
    return m;
  }
  // The checkpoint a run would resume from this path (ckpt/locate.hpp): a damaged one is skipped
  // for the next. Each is tried by reading it into a model built from its own settings: the run's
  // deck and --set values (older checkpoints: their deck file), then this command's --set.
  const LocatedCheckpoint located =
      locate_for_reading(given, world.comm(), [&](const std::string& path, const CheckpointInfo& info) -> std::string {
        if (info.deck.empty())
          throw Error("checkpoint " + path + ": holds no deck; it was not written by shardtrain run",
                      ErrorScope::all_ranks);
        m.path = path;
        m.info = info;
        const std::string what = info.settings.empty() ? " (the deck stored in it)" : " (the run's settings stored in it)";
        m.config = parse_deck(info.settings_or_deck(), path + what, overrides);
        build_model(m, world, max_batch);
        return attempt_problem(
            [&] { read_checkpoint(path, model_shape(m.config.model), m.net->strategy(), world.comm()); });
      });
  if (world.is_root()) {
    for (const std::string& note : located.skip_notes("read")) std::cerr << "note: " << note << "\n";
    // A run stopped early (or still running) leaves a model that is not the trained one: say so.
    if (m.info.step < m.config.run.steps)
      std::cerr << "note: checkpoint " << m.path << " is at step " << m.info.step << " of the "
                << m.config.run.steps << " its run was set to train (the run stopped early, or is still running)\n";
  }
  return m;
}

// Whether a byte-tokenizer deck's tokens are bytes of text (rendered as text) or token ids: its
// first data file says, or, when the data are gone, the vocabulary.
bool bytes_are_tokens(const Config& config) {
  if (config.data.format != DataFormat::automatic) return config.data.format == DataFormat::text;
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
    codec.tokenizer =
        make_tokenizer(m.config.data.tokenizer, m.config.data.tokenizer_files, m.config.data.tokenizer_pattern);
  } catch (const Error& e) {
    problem = m.origin() + ": " + (m.weights ? "" : "its deck's ") + "data.tokenizer = \"" +
              name_of(m.config.data.tokenizer) + "\": " + e.what() +
              " (--set data.tokenizer_files=... names them here)";
  }
  agree_or_throw(world.comm(), problem);
  // A weights file's tokens are bytes of text only with a vocabulary of bytes.
  codec.text = m.config.data.tokenizer != TokenizerKind::byte ||
               (m.weights ? m.config.model.vocab_size == 256 : bytes_are_tokens(m.config));
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


// The JSON that --json prints, with what names the model: the checkpoint and its step, or the
// weights file (step null); its parameters and what this rank holds of them (forward passes
// only: no gradients or optimizer state).
nlohmann::ordered_json model_json(const LoadedModel& m) {
  nlohmann::ordered_json out;
  out[m.weights ? "weights" : "checkpoint"] = m.path;
  out["step"] = m.weights ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(m.info.step);
  out["parameters"] = m.net->model().layout().total();
  const MemoryReport memory = m.net->strategy().memory();
  out["model_state_bytes_per_rank"] = {
      {"params", memory.params}, {"grads", memory.grads}, {"optimizer", memory.optimizer}};
  return out;
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
    throw Error(m.origin() + ": the model reads token ids (" +
                    (m.weights ? std::string("its vocabulary is not bytes and no tokenizer was named")
                               : std::string("data.path is a token file")) +
                    "): give the prompt as --prompt-tokens \"id id ...\"",
                ErrorScope::all_ranks);
  }
  if (prompt.empty()) throw Error("--prompt-tokens: no token ids given", ErrorScope::all_ranks);
  nlohmann::ordered_json json = model_json(m);
  json["samples"] = nlohmann::ordered_json::array();
  for (int i = 0; i < r.samples; ++i) {
    const std::uint64_t seed = r.seed + static_cast<std::uint64_t>(i);
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int> tokens =
        generate(m.net->model(), m.net->strategy(), prompt, r.tokens, {r.temperature, r.top_k, seed});
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!world.is_root()) continue;
    const std::string rendered = codec.text ? render_text(tokens, *codec.tokenizer) : render_ids(tokens);
    if (r.json) {
      json["samples"].push_back({{"seed", seed},
                                 {"prompt_tokens", prompt},
                                 {"tokens", std::vector<int>(tokens.begin() + static_cast<std::ptrdiff_t>(prompt.size()),
                                                             tokens.end())},
                                 {"text", rendered},
                                 {"seconds", seconds}});
    } else {
      char rate[96];
      std::snprintf(rate, sizeof rate, "%d tokens in %.2f s, %.1f tokens/s", r.tokens, seconds,
                    seconds > 0 ? r.tokens / seconds : 0.0);
      std::cout << "---- sample " << i + 1 << " of " << r.samples << " (seed " << seed << "; " << rate << ") ----\n"
                << rendered << "\n";
    }
  }
  if (world.is_root()) {
    if (r.json) std::cout << json_text(json) << std::endl;
    else std::cout << "----" << std::endl;
  }
  return kExitOk;
}

int eval_command(const EvalRequest& r, World& world) {
  std::vector<std::string> overrides = r.overrides;
  const bool whole_file = !r.data.empty();
  if (whole_file) {
    overrides.push_back("data.path=" + toml_string(r.data, "--data"));
    // A file is read in windows of any length, its last one as short as what is left: rows that
    // sequence parallelism could not split between a tensor group's ranks. Splitting them only
    // saves activation memory; the loss is the same.
    overrides.push_back("parallel.sequence_parallel=false");
  }
  if (!whole_file && names_weights(r.checkpoint))
    throw Error("weights " + r.checkpoint + ": weights hold no data to evaluate on: give --data FILE",
                ErrorScope::all_ranks);
  if (whole_file && r.batches > 0)
    throw Error("--batches applies to the validation split; --data FILE evaluates every token of the file once",
                ErrorScope::all_ranks);
  LoadedModel m = load_model(r.checkpoint, overrides, world, 0);
  const Config& c = m.config;
  // The deck's validation data (its split of data.path, or data.val_path), or all of another file.
  const RunData data = open_run_data(c, world.comm(), whole_file);
  const Split& split = data.splits.val;
  // The data-parallel ranks split the batches (a tensor group's ranks share theirs).
  const BatchPlan plan = plan_batches(c.data, c.model.seq_len, m.net->data_ranks(), c.deck_path);
  nlohmann::ordered_json json = model_json(m);
  std::string summary;
  double loss = 0;
  if (whole_file) {
    const InOrderLoss in_order = mean_loss_in_order(*m.net, split, plan.seq_len, plan.micro_batch);
    loss = in_order.mean;
    json["tokens"] = in_order.predicted;
    json["windows"] = in_order.windows;
    json["last_window"] = in_order.last_window;
    summary = "over all " + std::to_string(in_order.predicted) + " predicted tokens of " + split.data->name() + " (" +
              std::to_string(split.size()) + " tokens, in order: " + std::to_string(in_order.windows) +
              " window(s) of " + std::to_string(plan.seq_len) +
              (in_order.last_window > 0 ? " and one of " + std::to_string(in_order.last_window) : std::string()) + ")";
  } else {
    const std::int64_t batches = r.batches > 0 ? r.batches : c.run.eval_batches;
    BatchLoader loader(split, c.data.order, static_cast<std::uint64_t>(c.run.seed), kValStream, c.model.seq_len,
                       plan.global_batch, "validation");
    loss = mean_loss(*m.net, loader, plan, m.net->data_rank(), batches);
    json["batches"] = batches;
    json["sequences_per_batch"] = plan.global_batch;
    json["seq_len"] = plan.seq_len;
    summary = "over " + std::to_string(batches) + " batch(es) of " + std::to_string(plan.global_batch) +
              " sequences of " + std::to_string(plan.seq_len) + " tokens drawn from " + split.data->name() +
              " (validation split, tokens " + std::to_string(split.begin) + " to " + std::to_string(split.end) + ")";
    json["data"] = split.data->name() + " (validation split, tokens " + std::to_string(split.begin) + " to " +
                   std::to_string(split.end) + ")";
  }
  if (!world.is_root()) return kExitOk;
  if (r.json) {
    json["loss"] = loss;
    json["perplexity"] = std::exp(loss);
    if (whole_file) json["data"] = split.data->name();
    std::cout << json_text(json) << std::endl;
  } else {
    char line[96];
    std::snprintf(line, sizeof line, "eval: loss %.6f, perplexity %.4f ", loss, std::exp(loss));
    std::cout << line << summary << "; " << m.origin() << std::endl;
  }
  return kExitOk;
}

}  // namespace st::app
