#pragma once
// The settings table's rows for what a deck derives (world, batches, model state, activations,
// data), shared by `shardtrain check`, which predicts them before anything is allocated, and
// `shardtrain run`, which reports them as built: one source, so the two say the same things in
// the same words. Each command adds the rows only it knows (check: predicted traffic and memory,
// what a resume would do; run: the execution backend, measured rates).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/choices.hpp"
#include "data/batches.hpp"
#include "deck/config.hpp"
#include "model/activations.hpp"
#include "parallel/strategy.hpp"

namespace st {

struct DerivedSettings {
  int world_size = 0;
  std::string world_note;  // e.g. " (--ranks)"
  std::string device;      // DeviceChoice::note
  BatchPlan batches;
  std::size_t parameters = 0, segments = 0;
  std::string strategy;  // what is sharded over how many ranks, and the precision
  MemoryReport model_state;   // per rank
  std::string model_state_note;  // e.g. "largest rank"
  std::uint64_t activations = 0;  // per rank
  Recompute recompute = Recompute::none;
  bool bf16_activations = false;  // the model stores bf16 activations (parallel.activations)
  std::string attention;  // describe_attention
  std::string classifier;  // describe_classifier

  std::string data, tokenizer, run_directory;
  bool sequential_data = false;  // data.order = "sequential"
};

using SettingsRows = std::vector<std::pair<std::string, std::string>>;
SettingsRows derived_rows(const DerivedSettings& s);

// Which attention training runs and why (exec/attention_probs.hpp decides): flash attention, or
// the exact path and what keeps it there. `gpu`: the ranks compute on GPUs.
std::string describe_attention(bool gpu, Precision precision, AttentionChoice attention, int head_dim);
// Which classifier training runs and why: fused (bf16 logits) or unfused (fp32 logits). A model
// with bf16 activations always fuses it.
std::string describe_classifier(bool gpu, const ParallelConfig& parallel);

// Where the deck asks for bf16 activations on GPUs: throws Error (every rank decides alike)
// naming the keys where a GPU cannot store them. Its kernels with bf16 storage run attention as
// flash attention, so they need parallel.attention at "auto" and a head width flash attention has
// a kernel for. `run`, `check` and `plan` refuse alike, before anything is allocated.
void refuse_gpu_bf16_activations(const Config& config);

}  // namespace st
