#pragma once
// The flat parameter layout: every parameter of the model lives in one buffer, grouped into
// segments (embeddings, one per transformer block, final norm). Gradients, Adam moments and any
// sharded copy use the same layout, so "which bytes are where" has one answer.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/choices.hpp"

namespace st {

// Arch (model.arch) and RopeScaling (model.rope_scaling) are deck choices (core/choices.hpp).

struct ModelShape {
  std::int64_t n_layer = 0;
  std::int64_t d_model = 0;
  std::int64_t n_head = 0;
  std::int64_t seq_len = 0;       // maximum context (gpt2: rows of the position table)
  std::int64_t vocab_size = 0;    // tokens the model predicts
  std::int64_t padded_vocab = 0;  // rows of the token table (>= vocab_size)
  Arch arch = Arch::gpt2;
  // llama only (gpt2 keeps these defaults, and its checkpoints do not record them):
  std::int64_t n_kv_head = 0;     // key/value heads, dividing n_head (0: n_head)
  std::int64_t ffn_dim = 0;       // the SwiGLU MLP's hidden width (0: gpt2's 4 d_model)
  double norm_eps = 1e-5;         // RMSNorm's epsilon
  double rope_theta = 10000.0;    // the rotary embedding's base
  bool tie_embeddings = true;     // the LM head is the token embedding
  // llama with rope_scaling llama3 only (the others keep these defaults and do not record them):
  RopeScaling rope_scaling = RopeScaling::none;
  double rope_factor = 8.0;                      // factor
  double rope_low_freq_factor = 1.0;             // low_freq_factor
  double rope_high_freq_factor = 4.0;            // high_freq_factor
  std::int64_t rope_original_positions = 8192;   // original_max_position_embeddings

  std::int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  std::int64_t head_dim() const { return d_model / n_head; }
  std::int64_t hidden() const { return ffn_dim > 0 ? ffn_dim : 4 * d_model; }
  // Width of a row of the fused q, k, v projection: d_model + 2 kv_heads head_dim.
  std::int64_t qkv_width() const { return d_model + 2 * kv_heads() * head_dim(); }
  // Output width of a block's widest linear layer: GPT-2's MLP up-projection, Llama's fused gate
  // and up projection.
  std::int64_t widest_linear() const;
};

// "n_layer 2, d_model 32, n_head 4, seq_len 32, vocab 256 (padded 256)", and for llama
// "llama, n_layer 2, ..., n_head 4, n_kv_head 2, ffn_dim 48, untied LM head, seq_len ...".
std::string model_summary(const ModelShape& shape);

// "gpt2" / "llama", and back (nullopt for another name): model.arch's words (core/choices.hpp),
// which a checkpoint records at /model/arch.
const char* arch_name(Arch arch);
std::optional<Arch> arch_from_name(std::string_view name);
// "none" / "llama3", and back (nullopt for another name): model.rope_scaling's words.
const char* rope_scaling_name(RopeScaling scaling);
std::optional<RopeScaling> rope_scaling_from_name(std::string_view name);

// Llama's rounding of the MLP width: 2/3 of 4 d_model, times ffn_dim_multiplier, rounded up to a
// multiple of `multiple_of` (Meta's reference code; 11008 for Llama 2 7B, 14336 for Llama 3 8B
// with multiplier 1.3).
std::int64_t llama_ffn_dim(std::int64_t d_model, std::int64_t multiple_of, double multiplier = 1.0);

enum class TensorRole { matrix, bias, norm, embedding };

// Tensor parallelism: each layer split over `degree` consecutive ranks (parallel.tensor); this
// rank is `rank` among them. Degree 1 holds every tensor whole.
struct TensorSplit {
  int degree = 1;
  int rank = 0;
  bool active() const { return degree > 1; }
};

// A rank's share of `whole` along a dimension its tensor-parallel group splits (the whole when
// the group is one rank); and where the parts given are whole tensors' sizes (a fused
// projection's), the rows a rank holds: each part's share. The families' layouts (model/arch_*.cpp)
// size their slices so.
std::int64_t rank_share(std::int64_t whole, TensorSplit split);
std::int64_t rank_shares(std::initializer_list<std::int64_t> parts, TensorSplit split);

// Which dimension of a tensor the ranks of a tensor-parallel group split (Megatron's scheme):
//   none     every rank holds the whole tensor (norms, the biases added after a reduction,
//            GPT-2's position table) and computes the same gradient for it;
//   rows     output features (column-parallel projections: q/k/v, the MLP's up projections,
//            their biases) and vocabulary rows (the token table, the LM head);
//   columns  input features (row-parallel projections: attention's output, the MLP's down
//            projection), whose partial products the group sums.
enum class SplitDim { none, rows, columns };

struct TensorSlot {
  std::string name;                 // "block0.attn.qkv.w"
  std::size_t offset = 0;           // into the flat buffer
  std::size_t size = 0;             // elements
  std::vector<std::int64_t> shape;  // row-major; matrices are [out, in] as in torch.nn.Linear
  TensorRole role = TensorRole::matrix;
  SplitDim split = SplitDim::none;  // under tensor parallelism (make_layout with a split)
  // The stacked parts along the split dimension, as sizes in the whole tensor: a fused
  // projection splits each of its parts alike (q, k and v's rows; gate's and up's), so that a
  // rank holds whole heads of each. One part (the whole dimension) otherwise; none unsplit.
  std::vector<std::int64_t> parts;
};

struct Segment {
  std::string name;  // "embeddings", "block3", "final_norm"
  std::size_t offset = 0;
  std::size_t size = 0;
  std::vector<TensorSlot> tensors;
};

// A tensor as a layout is built from it: its shape on this rank, its role, and how tensor
// parallelism splits it (the parts along the split dimension as sizes in the whole tensor; none
// for a tensor every rank holds whole).
struct TensorSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  TensorRole role = TensorRole::matrix;
  SplitDim split = SplitDim::none;
  std::vector<std::int64_t> parts = {};
};

class ParamLayout {
 public:
  void add_segment(const std::string& name, const std::vector<TensorSpec>& tensors);
  const std::vector<Segment>& segments() const { return segments_; }
  std::size_t total() const { return total_; }
  const TensorSlot& tensor(const std::string& name) const;  // throws Error if absent
  std::vector<const TensorSlot*> all_tensors() const;

 private:
  std::vector<Segment> segments_;
  std::size_t total_ = 0;
};

// The part of the model one pipeline stage computes (one model chunk of it): blocks
// [first_block, end_block), with the token embedding where the part starts at block 0 and the
// final norm, the LM head and the loss where it ends at the last block. The default is the
// whole model. A part that ends the model holds the embeddings' segment too, for the head: the
// token table itself when the head is tied to it, whose gradient the first and the last part
// then each hold a share of (the pipeline sums them).
struct ModelPart {
  std::int64_t first_block = 0;
  std::int64_t end_block = -1;  // -1: to the model's last block
  std::int64_t end(const ModelShape& shape) const { return end_block < 0 ? shape.n_layer : end_block; }
  std::int64_t blocks(const ModelShape& shape) const { return end(shape) - first_block; }
  bool embeds() const { return first_block == 0; }
  bool heads(const ModelShape& shape) const { return end(shape) == shape.n_layer; }
  bool whole(const ModelShape& shape) const { return embeds() && heads(shape); }
  // Whether the part's layout has the embeddings' segment (its first).
  bool holds_embeddings(const ModelShape& shape) const { return embeds() || heads(shape); }
};

// The layout of the shape's architecture. Segments: "embeddings" (gpt2: wte, wpe; llama: wte,
// and lm_head.w when untied), one per block, "final_norm". Fused tensors keep one matmul per
// step: llama's attn.qkv.w stacks q, k and v's rows (Hugging Face's q_proj, k_proj, v_proj in
// that order), mlp.gate_up.w stacks gate_proj's rows over up_proj's.
// With an active split: the layout of one rank of the tensor-parallel group, its tensors the
// rank's slices (same names, in the same order; each fused part sliced alike). Throws Error when
// the shape does not divide (tensor_split_problem).
ParamLayout make_layout(const ModelShape& shape, TensorSplit split = {});
// The segments of `part` (ModelPart) of the layout: the embeddings' where the part holds them,
// its blocks, the final norm's where it heads the model; offsets start again from 0.
ParamLayout make_layout(const ModelShape& shape, TensorSplit split, const ModelPart& part);
// The same from a whole layout of the shape (make_layout(shape, split)).
ParamLayout part_layout(const ParamLayout& whole, const ModelShape& shape, const ModelPart& part);
// A pipeline stage's layout: the segments of each of its chunks' parts, one chunk after another
// (what train/pipeline_stage.hpp builds from its models).
ParamLayout stage_layout(const ModelShape& shape, TensorSplit split, const std::vector<ModelPart>& parts);

// Why `degree` ranks cannot split the shape's layers evenly ("" when they can): the attention
// heads (and a Llama's key/value heads), the MLP width and the padded vocabulary must divide.
std::string tensor_split_problem(const ModelShape& shape, int degree);

// Where a rank's slice of each tensor lies in the whole tensor: calls
// run(whole_offset, slice_offset, count) for every contiguous run of the slice, with offsets
// into the flat buffers of `whole` (make_layout(shape)) and `slice` (make_layout(shape, split)).
// Replicated tensors are one run of the whole tensor. Runs come in the slice's order.
template <class Run>
void for_each_slice_run(const ParamLayout& whole, const ParamLayout& slice, TensorSplit split, Run&& run);

// Matmul-weighted parameter count used for FLOP estimates: block matrices plus the LM head.
std::int64_t matmul_params(const ModelShape& shape);
// Training FLOPs per token (forward + backward) for a sequence of length seq: 6 x the matmul
// parameters plus 12 n_layer d_model seq for attention scores and their use over the full
// T x T (PaLM's count; with grouped-query attention the scores are as many: every query head
// attends). The planner's compute time.
double train_flops_per_token(const ModelShape& shape, std::int64_t seq);
// Its parts, at the shape's seq_len: one block's, and the LM head's (the embedding lookup costs
// none). n_layer x block + head = train_flops_per_token. What a pipeline's chunks are balanced by.
double block_train_flops_per_token(const ModelShape& shape);
double head_train_flops_per_token(const ModelShape& shape);
// The same as llm.c counts it for MFU (train_gpt2.cu, gpt2_estimate_mfu): 6 N + 6 n_layer
// d_model seq, N every parameter (embeddings, norms and biases too: llm.c's num_parameters, the
// padded vocabulary's rows included) and the attention's term halved, causal attention computing
// half of the T x T scores. The step line's MFU, so that it reads as llm.c's does.
double mfu_flops_per_token(const ModelShape& shape, std::int64_t seq);

// The runs of one tensor, offsets relative to the tensors' first elements (for_each_slice_run).
template <class Run>
void for_each_tensor_run(const TensorSlot& whole, const TensorSlot& slice, TensorSplit split, Run&& run) {
  if (slice.split == SplitDim::none) {
    run(std::size_t{0}, std::size_t{0}, slice.size);
    return;
  }
  // Row-major [rows, columns] (a vector is one column of rows).
  const auto columns = static_cast<std::size_t>(whole.shape.size() > 1 ? whole.shape[1] : 1);
  const auto degree = static_cast<std::size_t>(split.degree), rank = static_cast<std::size_t>(split.rank);
  if (slice.split == SplitDim::rows) {
    std::size_t part_start = 0, local = 0;  // rows
    for (const std::int64_t part : slice.parts) {
      const std::size_t rows = static_cast<std::size_t>(part) / degree;
      run((part_start + rank * rows) * columns, local * columns, rows * columns);
      part_start += static_cast<std::size_t>(part);
      local += rows;
    }
    return;
  }
  const auto rows = static_cast<std::size_t>(whole.shape[0]);
  const std::size_t width = columns / degree;
  for (std::size_t i = 0; i < rows; ++i) run(i * columns + rank * width, i * width, width);
}

template <class Run>
void for_each_slice_run(const ParamLayout& whole, const ParamLayout& slice, TensorSplit split, Run&& run) {
  const auto wholes = whole.all_tensors(), slices = slice.all_tensors();
  for (std::size_t i = 0; i < slices.size(); ++i)
    for_each_tensor_run(*wholes[i], *slices[i], split, [&](std::size_t w, std::size_t s, std::size_t n) {
      run(wholes[i]->offset + w, slices[i]->offset + s, n);
    });
}

}  // namespace st
