#include "app/commands.hpp"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>

#include "app/use_commands.hpp"
#include "app/version.hpp"
#include "ckpt/checkpoint.hpp"
#include "ckpt/locate.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "data/batches.hpp"
#include "data/dataset.hpp"
#include "deck/parse.hpp"
#include "deck/read.hpp"
#include "deck/schema.hpp"
#include "model/model.hpp"
#include "optim/schedule.hpp"
#include "parallel/deck_plan.hpp"
#include "parallel/plan.hpp"
#include "plan/fit.hpp"
#include "plan/planner.hpp"
#include "runtime/device_choice.hpp"
#include "train/report.hpp"
#include "train/run_dir.hpp"
#include "train/run_settings.hpp"
#include "train/sharded_model.hpp"
#include "train/train_deck.hpp"
#include "weights/init_from.hpp"

namespace st::app {
namespace {

// The planner's figure for the deck's strategy, with the limit it is checked against.
std::string predicted_memory_line(const Config& config, const Machine& machine, int group) {
  const StrategyPrediction p = predict_strategy(config, machine, config.parallel.strategy, group, std::nullopt,
                                                static_cast<int>(config.parallel.tensor));
  auto b = [](std::uint64_t x) { return format_bytes(static_cast<double>(x)); };
  const std::string scratch =
      p.kernel_scratch_bytes > 0 ? ", " + b(p.kernel_scratch_bytes) + " of it the kernels' scratch" : std::string();
  return b(p.total_bytes()) + " predicted (model state + activations + workspace " + b(p.workspace_bytes) + scratch +
         "); limit " + format_bytes(machine.memory_per_rank) + " (" + machine.memory_source + ")";
}

// CLI11's PositiveNumber and NonNegativeNumber print their range in full (0.000000 to a number
// of 309 digits); these say in words what a number option takes.
CLI::Validator number_above(double bound, bool inclusive, const std::string& words) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double x = 0;
        if (!CLI::detail::lexical_cast(text, x)) return "'" + text + "' is not a number";
        if (inclusive ? x >= bound : x > bound) return "";
        return "must be " + words + ", got " + text;
      },
      words, "");
}
const CLI::Validator kPositive = number_above(0, false, "above 0");
const CLI::Validator kNonNegative = number_above(0, true, "0 or more");

}  // namespace

Config load_config(const DeckRequest& request, World& world) {
  const std::string text = read_deck_text(request.deck_path, world.comm());
  Config config = parse_deck(text, request.deck_path, request.overrides);
  // Before the shape is used anywhere: model.from_file takes it from the weights file.
  resolve_init_from(config, world.comm());
  return config;
}

int run_deck(const DeckRequest& request, World& world) {
  Config config = load_config(request, world);
  const TrainSummary summary = train_deck(config, world, request.machine, request.save_params);
  if (summary.diverged) return kExitDiverged;
  return summary.stop_signal != 0 ? kExitStopped : kExitOk;
}

// What checkpoint.resume would do: the checkpoint `run` would resume (chosen by the same
// locate_resume, each candidate's checksums verified as a resume reads them), which steps it
// trains, what it skips, or why the resume is refused (then check fails as run would).
// Collective.
std::string describe_resume(const Config& config, const ModelShape& shape, World& world) {
  const std::string fresh = config.model.init_from.empty() ? "starts from step 0"
                                                           : "starts from step 0 with " + config.model.init_from;
  if (config.checkpoint.resume == "none") return "none: " + fresh;
  const ResumeRequest request{config.checkpoint.resume, checkpoint_dir_of(config), shape, config.deck_path};
  const LocatedCheckpoint located = locate_resume(request, world.comm(), verifying(world.comm()));
  if (!located.found()) return "latest: no checkpoint in " + request.dir + "; " + fresh;
  const CheckpointInfo& info = located.info;
  std::string what = located.path + " at step " + std::to_string(info.step) + " (written by " +
                     std::to_string(info.world_size) + " rank(s) with " + info.strategy + ", " + info.precision + ")";
  if (info.step >= config.run.steps)
    what += ": the run has finished (run.steps = " + std::to_string(config.run.steps) +
            "); run says so and exits 0 without training";
  else
    what += ": trains steps " + std::to_string(info.step + 1) + " to " + std::to_string(config.run.steps);
  std::vector<std::string> skipped;
  for (const SkippedCheckpoint& s : located.skipped) skipped.push_back(s.reason);
  if (!skipped.empty()) what += " (skipping " + join(skipped, "; ") + ")";
  return what;
}

int check_deck(const DeckRequest& request, World& world, int ranks) {
  Config config = load_config(request, world);
  const int world_size = ranks > 0 ? ranks : world.size();
  const bool automatic = config.parallel.strategy == StrategyKind::automatic;
  // Where run would compute: refused here already when the deck asks for a GPU this node lacks.
  // (A check for another number of ranks decides as if on real nodes.)
  const DeviceChoice device = choose_device(config.parallel.device, world.comm(), request.deck_path,
                                            ranks > 0 ? 0 : deck_ranks_per_node(config, world.size()));
  const Machine machine = deck_machine(config, world, device, request.machine, ranks);
  if (machine.gpu) refuse_gpu_bf16_activations(config);
  std::string auto_table;
  if (automatic) auto_table = resolve_auto_strategy(config, machine);
  resolve_grad_reduction(config, machine);
  check_memory_fits(config, machine);
  deck_ranks_per_node(config, world_size);  // refuses emulated nodes that do not divide the ranks (GPU path too)
  const RunData data = open_run_data(config, world.comm());
  // The batch splits between the data-parallel ranks (a tensor group's ranks share theirs, a
  // pipeline's stages each micro-batch).
  const auto tensor = static_cast<int>(config.parallel.tensor);
  const BatchPlan batch_plan =
      plan_batches(config.data, config.model.seq_len, deck_data_ranks(config, world_size), config.deck_path);
  // The loaders refuse a sequential batch that does not fit in its part of the data.
  BatchLoader(data.splits.train, config.data.order, 0, 0, config.model.seq_len, batch_plan.global_batch, "training");
  BatchLoader(data.splits.val, config.data.order, 0, 1, config.model.seq_len, batch_plan.global_batch, "validation");
  const ModelShape shape = model_shape(config.model);
  const ParamLayout layout = make_layout(shape);
  const Recompute recompute = config.model.recompute;
  // Rank 0's, as run reports them: under a pipeline the first stage's, for each micro-batch in flight.
  const std::uint64_t activations =
      config.parallel.pipeline > 1
          ? stage_activation_bytes(config, machine, batch_plan.micro_batch, recompute, tensor,
                                   deck_pipeline(config, world_size, batch_plan.accum_steps), 0)
          : predicted_activation_bytes(config, machine, batch_plan.micro_batch, recompute, tensor);
  const auto& p = config.parallel;
  // The plan the run would make: the planner's machine says how the ranks split into nodes.
  const ParallelPlan predicted = deck_plan(config, machine);
  const bool hsdp = predicted.grouped();
  const int group = predicted.mesh().shards;
  auto b = [](std::uint64_t x) { return format_bytes(static_cast<double>(x)); };
  DerivedSettings predicted_settings;
  predicted_settings.world_size = world_size;
  predicted_settings.world_note = ranks > 0 ? " (--ranks)" : "";
  predicted_settings.device = device.note;
  predicted_settings.batches = batch_plan;
  predicted_settings.parameters = layout.total();
  predicted_settings.segments = layout.segments().size();
  predicted_settings.strategy = name_of(p.strategy) + (hsdp ? " in groups of " + std::to_string(group) + " ranks" : "") +
                                ", " + name_of(p.precision) + tensor_split_note(tensor, deck_data_ranks(config, world_size)) +
                                pipeline_note(config, batch_plan.accum_steps, batch_plan.micro_batch);
  const ParallelPlan::ModelState& state = predicted.model_state();
  predicted_settings.model_state = {state.params, state.grads, state.optimizer, 0};
  predicted_settings.model_state_note = "largest rank";
  predicted_settings.activations = activations;
  predicted_settings.recompute = recompute;
  predicted_settings.attention = describe_attention(machine.gpu, p.precision, p.attention,
                                                    static_cast<int>(shape.head_dim()));
  predicted_settings.classifier = describe_classifier(machine.gpu, p);
  predicted_settings.bf16_activations = p.stores_bf16_activations();
  predicted_settings.data = describe_data(data);
  predicted_settings.sequential_data = config.data.order == DataOrder::sequential;
  predicted_settings.tokenizer = data.tokenizer->description();
  predicted_settings.run_directory = resolve_out_dir(config);
  SettingsRows derived = derived_rows(predicted_settings);
  std::string traffic = b(predicted.group_bytes()) + (hsdp ? " within groups of " + std::to_string(group) : "");
  if (hsdp) traffic += ", " + b(predicted.replica_bytes()) + " across groups";
  if (tensor > 1) traffic += ", " + b(predicted.tensor_bytes()) + " within the tensor group (activations)";
  const SettingsRows predictions = {
      {"comm per step per rank", traffic},
      {"memory per rank", predicted_memory_line(config, machine, group)},
      {"resume", describe_resume(config, shape, world)},
  };
  require_run_directories(config, world.comm());  // where run would write, in run's order: refused as run refuses it
  derived.insert(derived.end(), predictions.begin(), predictions.end());
  if (world.is_root()) {
    if (automatic) std::cout << "parallel.strategy = \"auto\": the planner's table\n" << auto_table;
    std::cout << settings_table(config, derived);
    for (const std::string& warning : schedule_warnings(config.optimizer, config.run.steps))
      std::cout << "warning: " << warning << "\n";
    std::cout << "deck OK\n";
  }
  return kExitOk;
}

int print_deck_doc() {
  std::cout << deck_reference_markdown();
  return kExitOk;
}

int main_with_mpi(int argc, char** argv) {
  World world;
  CLI::App cli{"shardtrain: train GPT-2 and Llama models with MPI (and CUDA/NCCL on GPUs); parameters, gradients "
               "and optimizer state sharded per the deck's parallel strategy, layers split over tensor-parallel ranks.",
               "shardtrain"};
  cli.set_version_flag("--version", [] { return version_text(); });
  cli.require_subcommand(1);
  DeckRequest request;
  int ranks = 0;

  auto add_deck_options = [&request](CLI::App* sub) {
    sub->add_option("deck", request.deck_path, "TOML input deck")->required();
    sub->add_option("--set", request.overrides, "Override a deck key: --set section.key=value (repeatable)")
        ->type_name("KEY=VALUE");
  };
  auto add_memory_option = [&request](CLI::App* sub) {
    sub->add_option("--node-mem-gb", request.machine.node_mem_gb,
                    "Memory of one node in GiB, shared by its ranks (default: SHARDTRAIN_NODE_MEM_GB, else "
                    "/proc/meminfo MemAvailable shared by the host's ranks)")
        ->check(kPositive);
  };
  auto* run = cli.add_subcommand("run", "Train on the deck's settings");
  add_deck_options(run);
  add_memory_option(run);
  run->add_option("--save-params", request.save_params,
                  "After training, write the full fp32 parameters (flat layout, raw little-endian float32) here");
  auto* check = cli.add_subcommand("check", "Validate the deck and its data, print the resolved settings, exit");
  add_deck_options(check);
  check->add_option("--ranks", ranks, "Plan for this many ranks instead of the job's size")->check(kPositive);
  add_memory_option(check);
  auto* plan = cli.add_subcommand("plan", "Predict memory and step time of every strategy for the deck, recommend one");
  add_deck_options(plan);
  add_memory_option(plan);
  plan->add_option("--ranks", ranks, "CPU: plan for this many ranks instead of the job's size")
      ->check(kPositive);
  MachineOptions& mo = request.machine;
  plan->add_option("--topology", mo.topology_file, "A saved `nvidia-smi topo -m` output: plan for those GPUs");
  plan->add_option("--nodes", mo.nodes, "Nodes of this kind")->check(kPositive);
  plan->add_option("--gpus-per-node", mo.gpus_per_node, "GPUs used per node (default: all in the topology)")
      ->check(kPositive);
  plan->add_option("--gpu-mem", mo.gpu_mem_gb, "Memory per GPU in GiB (default: NVML's figure)")
      ->check(kPositive);
  plan->add_option("--tflops", mo.tflops, "Compute rate per GPU in TFLOP/s (default 100, said in the output)")
      ->check(kPositive);
  plan->add_option("--inter-node-gbps", mo.inter_node_gbps, "Network bandwidth between nodes, GB/s per direction")
      ->check(kPositive);
  plan->add_option("--inter-node-latency-us", mo.inter_node_latency_us, "Latency per collective across nodes (us)")
      ->check(kNonNegative);
  std::string topo_file;
  auto* topo = cli.add_subcommand("topo", "Show the node's wiring (GPU links, fast groups, NICs) and what it means");
  topo->add_option("--topology", topo_file, "Read a saved `nvidia-smi topo -m` output instead of detecting");
  auto* doctor = cli.add_subcommand("doctor", "Check the setup (MPI, launcher, threads, BLAS, topology, memory)");
  auto* doc = cli.add_subcommand("deck-doc", "Print the input deck reference (docs/deck.md)");
  TokenizeRequest tokenize_request;
  auto* tokenize = cli.add_subcommand(
      "tokenize", "Encode a text with a tokenizer (GPT-2's by default) into llm.c token files (256 x int32 header; "
                  "uint16 tokens, or uint32 when the vocabulary exceeds 65536); under mpirun the ranks share the text "
                  "and write the same files as one rank");
  tokenize->add_option("input", tokenize_request.input, "Text file")->required();
  tokenize->add_option("output", tokenize_request.output, "Token file (with --shard-tokens: the name shards follow)")
      ->required();
  tokenize->add_option("--tokenizer", tokenize_request.tokenizer,
                       "As data.tokenizer: gpt2 (default), hf (a tokenizer.json) or tiktoken (a rank file such as "
                       "cl100k_base.tiktoken)")
      ->check(CLI::IsMember({"gpt2", "hf", "tiktoken"}));
  tokenize->add_option("--tokenizer-pattern", tokenize_request.pattern,
                       "As data.tokenizer_pattern, for hf and tiktoken: auto (default: the file's), gpt2 or cl100k")
      ->check(CLI::IsMember({"auto", "gpt2", "cl100k"}));
  tokenize->add_option("--tokenizer-files", tokenize_request.tokenizer_files,
                       "As data.tokenizer_files. gpt2: [vocab.json merges.txt] or [encoder.json vocab.bpe] or a "
                       "directory holding them (default: " +
                           default_gpt2_files() +
                           ", which tools/setup.sh fills); hf: tokenizer.json or its directory; tiktoken: the rank file")
      ->expected(1, 2);
  tokenize->add_option("--shard-tokens", tokenize_request.shard_tokens,
                       "Write files of this many tokens, OUTPUT's name with _000000, _000001, ... before its extension")
      ->check(kPositive);
  tokenize->add_option("--separator", tokenize_request.separator,
                       "Documents are separated by lines holding exactly this text (e.g. % for fortune files); each "
                       "document is encoded alone after the tokenizer's document start (GPT-2: <|endoftext|>, 50256, "
                       "as llm.c does; a file with a beginning-of-text token: that token, else its end-of-text). "
                       "Default: the text is one stream, encoded as it is");
  auto* ckpt = cli.add_subcommand("ckpt", "Checkpoint tools");
  ckpt->require_subcommand(1);
  CkptRequest ckpt_request;
  auto* inspect = ckpt->add_subcommand("inspect", "Show what a checkpoint holds and verify every checksum");
  inspect->add_option("file", ckpt_request.file,
                      "Checkpoint file, its directory, a run directory or a `latest` pointer (the checkpoint a resume "
                      "would read)")
      ->required();
  auto* exporter = ckpt->add_subcommand(
      "export", "Write a checkpoint's parameters for other tools: HDF5 (one dataset per tensor, in its shape), an "
                "llm.c model file (GPT-2), or a Hugging Face model.safetensors (GPT-2, Llama: sharded above "
                "--max-shard-size) with config.json beside it");
  exporter->add_option("file", ckpt_request.file, "Checkpoint file, its directory, a run directory or a `latest` pointer")
      ->required();
  exporter->add_option("out", ckpt_request.out, "Output file (its directory is created if missing)")->required();
  exporter->add_flag("--force", ckpt_request.force, "Replace an existing output (never a checkpoint)");
  exporter->add_option("--format", ckpt_request.format, "hdf5 (default), llmc or safetensors")
      ->check(CLI::IsMember({"hdf5", "llmc", "safetensors"}));
  exporter->add_option("--dtype", ckpt_request.dtype, "fp32 (default) or bf16 (llmc: version 5; safetensors: BF16)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  exporter->add_option("--max-shard-size", ckpt_request.max_shard_size,
                       "safetensors of a Llama: split into model-0000k-of-0000n.safetensors shards with "
                       "model.safetensors.index.json above this size (default 5GB, as transformers; e.g. 200MB)");
  auto* weights = cli.add_subcommand("weights", "Weight files of other tools (GPT-2: llm.c, Hugging Face safetensors; Llama: Hugging Face safetensors)");
  weights->require_subcommand(1);
  WeightsRequest weights_request;
  auto* weights_inspect =
      weights->add_subcommand("inspect", "Check a weights file, read every value, show its model and the deck keys for it");
  weights_inspect->add_option("file", weights_request.file, "llm.c model file, model.safetensors, a Llama's index.json, or their directory")
      ->required();
  auto* weights_convert = weights->add_subcommand("convert", "Write a weights file in another format");
  weights_convert->add_option("file", weights_request.file, "llm.c model file, model.safetensors or its directory")
      ->required();
  weights_convert->add_option("out", weights_request.out, "Output file (its directory is created if missing)")->required();
  weights_convert->add_flag("--force", weights_request.force, "Replace an existing output (never a checkpoint)");
  weights_convert->add_option("--format", weights_request.format, "llmc or safetensors")
      ->required()
      ->check(CLI::IsMember({"llmc", "safetensors"}));
  weights_convert->add_option("--dtype", weights_request.dtype, "fp32 (default) or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  weights_convert->add_option("--max-shard-size", weights_request.max_shard_size,
                              "safetensors of a Llama: split into shards with model.safetensors.index.json above "
                              "this size (default 5GB)");
  weights_convert->add_option("--vocab-pad-to", weights_request.vocab_pad_to,
                              "Pad the token table to a multiple of this many rows (llm.c: 128 pads 50257 to 50304); "
                              "default: the file's own padding (none in a Hugging Face file)")
      ->check(kPositive);

  auto add_checkpoint_options = [](CLI::App* sub, std::string& checkpoint, std::vector<std::string>& overrides) {
    sub->add_option("checkpoint", checkpoint,
                    "Checkpoint file, checkpoint directory or run directory (its latest checkpoint), or weights: "
                    "GPT-2 (llm.c model file) or GPT-2 and Llama in Hugging Face's layout (model.safetensors, a "
                    "sharded model's index.json, or their directory)")
        ->required();
    sub->add_option("--set", overrides, "Override a key of the checkpoint's deck (e.g. parallel.strategy)")
        ->type_name("KEY=VALUE");
  };
  GenerateRequest gen;
  auto* generate = cli.add_subcommand(
      "generate", "Sample text from a trained GPT-2 or Llama (a checkpoint, a run directory, or weights), on any "
                  "number of ranks");
  add_checkpoint_options(generate, gen.checkpoint, gen.overrides);
  generate->add_option("--prompt", gen.prompt, "Text to continue, encoded by the deck's data.tokenizer (default: a newline for bytes, <|endoftext|> for gpt2)");
  generate->add_option("--prompt-tokens", gen.prompt_tokens, "Token ids to continue, \"1 2 3\" or \"1,2,3\"");
  generate->add_option("--samples", gen.samples, "Samples to draw (sample i uses seed + i)")->check(kPositive);
  generate->add_option("--tokens", gen.tokens, "Tokens to generate per sample")->check(kNonNegative);
  generate->add_option("--temperature", gen.temperature, "Softmax temperature (> 0)")->check(kPositive);
  generate->add_option("--top-k", gen.top_k, "Draw among the k most probable tokens (0: all)")
      ->check(kNonNegative);
  generate->add_option("--seed", gen.seed, "Seed of the draws");
  generate->add_flag("--json", gen.json, "One JSON object: the samples' tokens and text");
  EvalRequest ev;
  auto* eval = cli.add_subcommand(
      "eval", "Mean loss and perplexity of a trained GPT-2 or Llama (a checkpoint, a run directory, or weights) on "
              "its run's validation batches or on a whole file, on any number of ranks");
  add_checkpoint_options(eval, ev.checkpoint, ev.overrides);
  eval->add_option("--data", ev.data,
                   "Evaluate every token of this file once, in order, in windows of model.seq_len (default: the "
                   "run's validation batches)");
  eval->add_option("--batches", ev.batches,
                   "Validation batches of data.global_batch sequences (default: run.eval_batches; not with --data)")
      ->check(kPositive);
  eval->add_flag("--json", ev.json, "One JSON object");

  // A first word that is not an option must name a subcommand: say which it is not, and what
  // there is (CLI11 would only say that a subcommand is required).
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : cli.get_subcommands([](CLI::App*) { return true; })) {
      known = known || sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      if (world.is_root())
        std::cerr << "shardtrain: unknown subcommand '" << argv[1] << "'; the subcommands are " << names
                  << " (shardtrain --help)\n";
      return kExitUsage;
    }
  }
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parsed the same argv; only rank 0 speaks.
    // --help and --version exit 0; any other parse error is a usage error, exit 2 (the README's
    // exit codes), not CLI11's own codes, said as every other error is.
    if (e.get_exit_code() == 0) {
      if (world.is_root()) cli.exit(e);
      return kExitOk;
    }
    if (world.is_root()) std::cerr << "shardtrain: error: " << e.what() << " (see shardtrain --help)\n";
    return kExitUsage;
  }
  if (*run) return run_deck(request, world);
  if (*check) return check_deck(request, world, ranks);
  if (*plan) return plan_command(request, request.machine, ranks, world);
  if (*topo) return topo_command(topo_file, world);
  if (*doctor) return doctor_command(world);
  if (*doc) return world.is_root() ? print_deck_doc() : kExitOk;
  if (*tokenize) return tokenize_command(tokenize_request, world);
  if (*generate) return generate_command(gen, world);
  if (*eval) return eval_command(ev, world);
  if (*ckpt) {
    ckpt_request.action = *inspect ? "inspect" : "export";
    return ckpt_command(ckpt_request, world);
  }
  if (*weights) {
    weights_request.action = *weights_inspect ? "inspect" : "convert";
    return weights_command(weights_request, world);
  }
  return kExitUsage;
}

}  // namespace st::app
