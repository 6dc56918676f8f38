#pragma once
// The resolved settings of one run: every key of the input deck, typed, after defaults,
// overrides and validation. Built only by parse_deck (deck/parse.hpp).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/choices.hpp"

namespace st {

struct RunConfig {
  std::int64_t steps = 0;
  std::int64_t seed = 0;
  std::int64_t log_every = 0;
  std::int64_t trace_steps = 0;
  std::int64_t eval_every = 0;
  std::int64_t eval_batches = 0;
  std::int64_t sample_every = 0;
  std::int64_t sample_tokens = 0;
  double sample_temperature = 1.0;
  std::string sample_prompt;
  std::string out_dir;
  std::int64_t threads = 0;
  ExportAtEnd export_at_end = ExportAtEnd::none;  // the trained model in Hugging Face's layout, or not
};

struct ModelConfig {
  std::int64_t n_layer = 0;
  std::int64_t d_model = 0;
  std::int64_t n_head = 0;
  std::int64_t seq_len = 0;
  std::int64_t vocab_size = 0;
  std::int64_t vocab_pad_to = 0;
  Arch arch = Arch::gpt2;
  std::int64_t n_kv_head = 0;   // llama: key/value heads (0: n_head)
  std::int64_t ffn_dim = 0;     // llama: the MLP's width (0: Llama's rounding from multiple_of)
  std::int64_t multiple_of = 0; // llama: ffn_dim's rounding
  double norm_eps = 0.0;        // llama: RMSNorm's epsilon
  double rope_theta = 0.0;      // llama: the rotary embedding's base
  bool tie_embeddings = true;   // llama: the LM head is the token embedding
  RopeScaling rope_scaling = RopeScaling::none;  // llama: the rotary frequencies' rescaling
  double rope_factor = 0.0;                   // llama3 scaling: factor
  double rope_low_freq_factor = 0.0;          // llama3 scaling: low_freq_factor
  double rope_high_freq_factor = 0.0;         // llama3 scaling: high_freq_factor
  std::int64_t rope_original_positions = 0;   // llama3 scaling: original_max_position_embeddings
  Recompute recompute = Recompute::none;
  std::string init_from;  // GPT-2 weights to start from ("": the random GPT-2 initialisation)
  bool from_file = false;  // take the model's shape from init_from's file
};

struct DataConfig {
  std::vector<std::string> path;      // files or globs, in order
  std::vector<std::string> val_path;  // empty: validation is the end of data.path
  DataFormat format = DataFormat::automatic;
  DataOrder order = DataOrder::random;
  TokenizerKind tokenizer = TokenizerKind::byte;
  std::vector<std::string> tokenizer_files;
  TokenizerPattern tokenizer_pattern = TokenizerPattern::automatic;  // hf and tiktoken only
  std::int64_t global_batch = 0;
  std::int64_t micro_batch = 0;
  double val_fraction = 0.0;
};

struct OptimizerConfig {
  double lr = 0.0;
  double min_lr = 0.0;
  std::int64_t warmup_steps = 0;
  LrSchedule schedule = LrSchedule::cosine;
  double weight_decay = 0.0;
  bool decay_embeddings = false;
  bool decay_norms_and_biases = false;
  double beta1 = 0.0;
  double beta2 = 0.0;
  double eps = 0.0;
  double grad_clip = 0.0;
};

struct ParallelConfig {
  StrategyKind strategy = StrategyKind::ddp;
  DeviceKind device = DeviceKind::automatic;
  Precision precision = Precision::fp32;
  AttentionChoice attention = AttentionChoice::automatic;
  ClassifierChoice classifier = ClassifierChoice::automatic;
  ActivationStorage activations = ActivationStorage::automatic;
  // Whether the model stores bf16 activations (Model<float, Bf16>, model/bf16_storage_model.hpp):
  // where the deck asks; "auto" is fp32 until a device has kernels that store bf16.
  bool stores_bf16_activations() const { return activations == ActivationStorage::bf16; }
  // The bytes of one activation value: 2 with bf16 activations, else 4.
  std::size_t activation_value_bytes() const { return stores_bf16_activations() ? 2 : 4; }
  bool sync_every_launch = false;  // GPUs: wait for and check every kernel where it is launched
  bool gelu_fusion = false;        // GPUs in bf16: GPT-2's GELU in cuBLASLt's epilogues
  std::int64_t ranks_per_node = 0;
  Collectives collectives = Collectives::automatic;
  IntraNode intra_node = IntraNode::shm;
  double collective_timeout_s = 0.0;
  double inter_node_gbps = 0.0;
  double inter_node_latency_us = 0.0;
  double bucket_mb = 0.0;
  std::int64_t shard_group = 0;
  std::int64_t tensor = 1;  // ranks of a tensor-parallel group (consecutive, inside a node)
  bool sequence_parallel = false;  // the rows between split layers split over the group too
  std::int64_t pipeline = 1;       // pipeline stages (the outermost mesh dimension)
  PipelineSchedule pipeline_schedule = PipelineSchedule::one_f_one_b;
  std::int64_t virtual_stages = 1;  // model chunks per stage (interleaved)
  // Blocks of each model chunk along the pipeline (pipeline x virtual_stages of them); empty:
  // balanced by the blocks' and the LM head's training FLOPs (parallel/pipeline_schedule.hpp).
  std::vector<std::int64_t> stage_blocks;
  bool overlap = true;
  GradReduction grad_reduction = GradReduction::automatic;
};

struct CheckpointConfig {
  std::string dir;
  std::int64_t every = 0;
  bool at_end = true;
  std::int64_t keep = 0;
  std::string resume;
  double timeout_s = 0.0;
  bool async = false;
};

struct Config {
  RunConfig run;
  ModelConfig model;
  DataConfig data;
  OptimizerConfig optimizer;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;

  std::string deck_path;  // as given on the command line
  std::string deck_text;  // the file's text, kept for the run directory and checkpoints
  // Where each key's value came from: "deck.toml:12", "--set", or "default".
  std::map<std::string, std::string> origin;
  // Each key's resolved value as TOML text, for the settings table and the run directory.
  std::map<std::string, std::string> resolved;
};

}  // namespace st
