#pragma once
// What a GPT-2 training step keeps in memory between forward and backward, and what it costs
// to keep less (activation recomputation):
//   none       every block keeps all it computed, the attention probabilities included
//              (B x heads x T x T per block: at long sequences the largest of all);
//   selective  blocks drop the attention probabilities and the GELU output, which backward
//              recomputes from what they keep (q and k, the MLP's input): large in memory,
//              cheap in FLOPs;
//   full       blocks keep only their input; backward reruns each block's forward first.
// With flash attention (a GPU in bf16: exec/attention_probs.hpp) no setting keeps
// probabilities: every block keeps each row's log-sum-exp (B x heads x T) instead, and the
// attention backward recomputes the probabilities tile by tile whatever the setting, so
// `selective` drops only the GELU output (the MLP's SwiGLU product for Llama).
// The model carves its buffers by these sizes (model/gpt2.cpp), and `check`, the planner and
// the memory lines predict with them, so prediction and allocation cannot drift apart.
#include <cstddef>
#include <cstdint>

#include "core/choices.hpp"
#include "exec/kernel_scratch.hpp"
#include "model/layout.hpp"

namespace st {

// Recompute is one of the deck's choices (core/choices.hpp); its word, for messages.
const char* recompute_name(Recompute recompute);

// Elements of one part of the activations by what they are stored in: values (activations and
// their gradients: the model's storage type, bf16 or fp32, double in gradient checks), statistics
// (a norm's mean and reciprocal deviation, attention's probabilities or log-sum-exps, losses, the
// vocabulary-parallel cross-entropy's and the norms' gradients under sequence parallelism: fp32,
// or double), and bf16 logits (a fused classifier's, whatever the storage).
struct ActivationCount {
  std::size_t values = 0, stats = 0, bf16 = 0;
  ActivationCount& operator+=(const ActivationCount& o) {
    values += o.values;
    stats += o.stats;
    bf16 += o.bf16;
    return *this;
  }
  // Each kind a run of its own, statistics, values, then bf16 logits, each run starting
  // kActivationRunAlignment bytes after an aligned one from the allocation's start (which a
  // device aligns to 256 bytes: its matmuls and vectorised kernels get aligned runs).
  std::size_t bytes(std::size_t value_bytes, std::size_t stat_bytes) const {
    return aligned_run(stats * stat_bytes) + aligned_run(values * value_bytes) + bf16 * 2;
  }
  static constexpr std::size_t kActivationRunAlignment = 256;
  static std::size_t aligned_run(std::size_t bytes) {
    return (bytes + kActivationRunAlignment - 1) / kActivationRunAlignment * kActivationRunAlignment;
  }
};

// For micro-batches of up to max_batch sequences with `heads_at_once` attention heads in flight,
// on a device or the host (what their attention needs differs: exec/attention_probs.hpp);
// `flash`: the attention is flash attention (attention_uses_flash), which keeps no T x T blocks,
// and `heads_at_once` does not count.
struct ActivationSizes {
  ActivationCount per_block;  // kept by each block until its backward
  ActivationCount working;    // one block's working set, shared by all blocks (recomputation)
  ActivationCount shared;     // the embeddings' output (a part's input) and the backward scratch
  ActivationCount head;       // the final norm, logits, losses: the part that ends the model's
  std::int64_t blocks = 0;
  ActivationCount all() const {
    ActivationCount a;
    for (std::int64_t b = 0; b < blocks; ++b) a += per_block;
    a += working;
    a += shared;
    a += head;
    return a;
  }
  // Bytes with values of value_bytes and statistics of stat_bytes each: what a model allocates
  // (model/model.hpp carves them in that order: statistics, values, bf16 logits).
  std::size_t bytes(std::size_t value_bytes, std::size_t stat_bytes) const { return all().bytes(value_bytes, stat_bytes); }
  // In 4-byte elements where values and statistics are fp32 (bf16 logits two to an element).
  std::size_t total() const {
    const ActivationCount a = all();
    return a.values + a.stats + (a.bf16 + 1) / 2;
  }
  // The sizes of a pipeline stage's part of the model (model/layout.hpp ModelPart): its blocks,
  // and the head's only where it ends the model.
  ActivationSizes of_part(const ModelPart& part, const ModelShape& shape) const {
    ActivationSizes s = *this;
    s.blocks = part.blocks(shape);
    if (!part.heads(shape)) s.head = {};
    return s;
  }
};
// `tensor`: ranks of a tensor-parallel group splitting each layer (the sizes of one of them);
// `sequence_parallel`: the rows between split layers split over them too (split_rows);
// `bf16_logits`: the logits are stored in bf16 (a fused classifier, LayerKernels::fused_classifier:
// a GPU in bf16), counted as ActivationCount::bf16.
ActivationSizes activation_sizes(const ModelShape& shape, int max_batch, Recompute recompute, int heads_at_once,
                                 bool device, int tensor = 1, bool sequence_parallel = false, bool flash = false,
                                 bool bf16_logits = false);
// What a rank holding `part` of the model (of a `tensor`-way split, its rows split under sequence
// parallelism) asks of its kernels at most, for micro-batches of up to max_batch sequences: the
// GPU kernels' scratch is sized from it (exec/kernel_scratch.hpp), by the model before its first
// step and by the planner.
KernelWorkload kernel_workload(const ModelShape& shape, int max_batch, int tensor, bool sequence_parallel,
                               const ModelPart& part);
// What attention needs of a block's activations: kept by the block until its backward (the
// probabilities, B x heads x T x T; or with flash attention each row's log-sum-exp, B x heads x
// T, whatever the recomputation, since its backward recomputes the probabilities anyway), in the
// working set when probabilities are recomputed (T x T per head in flight; flash: none), and in
// the backward scratch (the probabilities' gradient, T x T per head in flight; flash: each row's
// <dO, O>, B x heads x T). Every family's activation_sizes (model/arch.hpp) counts it.
struct AttentionSizes {
  std::size_t kept = 0, working = 0, backward = 0;
};
AttentionSizes attention_sizes(std::size_t max_batch, std::size_t T, int heads_here, int heads_at_once, Recompute recompute,
                               bool flash);
// `rows` rows of `columns` logits: values, or bf16 where the classifier is fused.
ActivationCount logit_count(std::size_t rows, std::size_t columns, bool bf16_logits);
// The rows a rank keeps of what lies between split layers (norm outputs, the residual stream):
// all `rows` without sequence parallelism; with it its share, rows / tensor, which may cut a
// sequence (a micro-batch of one long sequence splits too). Decoding feeds whole rows at most
// that many at a time (Model::decode).
std::size_t split_rows(std::size_t rows, int tensor, bool sequence_parallel);
// The vocabulary-parallel cross-entropy's scratch for `rows` rows on a rank of a tensor-parallel
// group of `tensor` ranks: its slice's statistics (3 per row), everyone's gathered (3 tensor per
// row), the rows' max and sum (2 per row). None without tensor parallelism.
std::size_t logit_slice_scratch(std::size_t rows, int tensor);

// FLOPs per token that recomputation adds to a training step (the model's FLOPs, and so MFU,
// leave them out, as is usual). With flash attention the scores are recomputed in backward
// whatever the setting (part of its backward, not of recomputation): selective adds no matmul
// FLOPs, full its block's forward alone.
double recompute_flops_per_token(const ModelShape& shape, std::int64_t seq, Recompute recompute, bool flash = false);

}  // namespace st
