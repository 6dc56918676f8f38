#pragma once
// A decoder-only transformer over the flat parameter layout, whatever its architecture: what the
// trainer, the sampler, the strategies and the tools use. model/gpt2.hpp and model/llama.hpp
// implement it; make_model picks by ModelShape::arch.
//
// Parameters and gradients are flat buffers owned by the caller (the parallel strategy), laid
// out by make_layout, in the backend's memory space; a model owns only activations (in the same
// space) and its copies of the batch's tokens.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "comm/communicator.hpp"
#include "exec/exec.hpp"
#include "model/activations.hpp"
#include "model/hooks.hpp"
#include "model/layout.hpp"

namespace st {

// The model's tensor-parallel group (Megatron's scheme, model/layout.hpp SplitDim): this rank's
// split of every layer and the communicator over the group's ranks, which sums the partial
// products of the row-parallel projections and the vocabulary slices' embeddings, and gathers
// the slices' cross-entropy statistics. Without a split (one rank) there is no communicator and
// the model is computed whole.
struct TensorGroup {
  TensorSplit split;
  Communicator* comm = nullptr;
  // Sequence parallelism (Megatron's): the rows between the split layers (norms, residual
  // stream) split over the group as well, rows / degree per rank; the sums after the
  // row-parallel layers become reduce-scatters, and the column-parallel layers' inputs are
  // all-gathered. Training and evaluation passes only; decoding works on whole rows.
  bool sequence_parallel = false;
  bool active() const { return split.active(); }
};

// Sequence parallelism's scratch in a model's activations (model/activations.cpp counts it): the
// rows a split layer reads, gathered (N x C); this rank's rows of the forward's and the
// backward's sums (R x C each); the norms' gradients on their way through the group (`norms`
// elements: a block's norm tensors).
template <class Real, class S = Real>
struct RowSplitScratch {
  S *gathered = nullptr, *tmp_rows = nullptr, *dtmp_rows = nullptr;
  Real* norm_grads = nullptr;
  template <class Carver>
  void carve(Carver& take, std::size_t N, std::size_t R, std::size_t C, std::size_t norms) {
    gathered = take.values(N * C);
    tmp_rows = take.values(R * C);
    dtmp_rows = take.values(R * C);
    norm_grads = take.stats(norms);
  }
};

// Carves a model's activations out of one allocation of ActivationCount::bytes(sizeof(S),
// sizeof(Real)): the statistics (Real) first, then the values (S), then the bf16 logits, each a
// run of its own starting on an aligned boundary, as bytes() counts them. exact() says whether the
// carve used each run up, as the count said.
template <class Real, class S>
class ActivationCarver {
 public:
  ActivationCarver(const Memory& memory, const ActivationCount& count)
      : stats_(static_cast<Real*>(memory.data())),
        stats_end_(stats_ + count.stats),
        values_(reinterpret_cast<S*>(at(memory, ActivationCount::aligned_run(count.stats * sizeof(Real))))),
        values_end_(values_ + count.values),
        bf16_(reinterpret_cast<Bf16*>(at(memory, ActivationCount::aligned_run(count.stats * sizeof(Real)) +
                                                     ActivationCount::aligned_run(count.values * sizeof(S))))),
        bf16_end_(bf16_ + count.bf16) {}
  Real* stats(std::size_t n) { return advance(stats_, n); }
  S* values(std::size_t n) { return advance(values_, n); }
  Bf16* bf16(std::size_t n) { return advance(bf16_, n); }
  bool exact() const { return stats_ == stats_end_ && values_ == values_end_ && bf16_ == bf16_end_; }

 private:
  static std::byte* at(const Memory& memory, std::size_t offset) { return static_cast<std::byte*>(memory.data()) + offset; }
  template <class T>
  static T* advance(T*& cursor, std::size_t n) {
    T* p = cursor;
    cursor += n;
    return p;
  }
  Real *stats_, *stats_end_;
  S *values_, *values_end_;
  Bf16 *bf16_, *bf16_end_;
};

// Real: parameters' gradients, per-row statistics and what comes back to the host (logits,
// probabilities); S: what parameters and activations are stored in (LayerKernels<Real, S>):
// Real itself, or bf16 (Model<float, Bf16>: bf16 parameters and activations, fp32 gradients).
template <class Real, class S = Real>
class Model {
 public:
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelShape& shape() const { return shape_; }
  // This rank's parameters: the whole model's layout, or under tensor parallelism its slice of
  // every layer (make_layout(shape, split)). Strategies shard and reduce this layout.
  const ParamLayout& layout() const { return layout_; }
  // The whole model's layout (make_layout(shape)): what init_params fills and checkpoints hold.
  const ParamLayout& whole_layout() const { return whole_layout_; }
  const TensorGroup& tensor_group() const { return tensor_; }
  // The blocks this model computes (a pipeline stage's part; the whole model by default), and
  // where its layout() has them: the embeddings' segment (where the part holds it) first, then
  // the blocks, then the final norm's (where the part ends the model).
  const ModelPart& part() const { return part_; }
  std::size_t block_segment(std::size_t local_block) const {
    return (part_.holds_embeddings(shape_) ? 1 : 0) + local_block;
  }
  std::size_t final_norm_segment() const { return layout_.segments().size() - 1; }

  // ---- a pipeline stage's part: what passes between stages ----
  // Elements of the rows that pass between two parts in a training or evaluation pass of B
  // sequences of T: the residual stream, this rank's rows of it under sequence parallelism.
  std::size_t part_boundary_elements(int B, int T) const;
  // The boundary rows, `count` values (part_boundary_elements) in the model's storage (S: fp32, or
  // bf16 for bf16 storage), as a Buffer the stages send as it is. A part that does not embed reads
  // its input from part_input, written before forward_into: the previous part's part_output.
  virtual Buffer part_input(std::size_t count) = 0;
  // After forward_into, a part that does not end the model has its last block's output here.
  virtual Buffer part_output(std::size_t count) = 0;
  // The gradient of the residual stream: before backward, a part that does not end the model
  // has d(loss)/d(part_output) written here (the next part's, after its backward); after
  // backward, a part that does not embed holds d(loss)/d(part_input) here.
  virtual Buffer part_grad(std::size_t count) = 0;
  // This rank's slice of whole parameters (or gradients) laid out as whole_layout(), laid out as
  // layout(): the part's tensors, each the rank's slice of it (a copy of them without tensor
  // parallelism, of the whole model).
  std::vector<Real> slice_of(std::span<const Real> whole) const;
  // The reverse, collective over the tensor group: every rank's slice (laid out as layout(), in
  // host memory) gathered into whole parameters on every rank of the group (a copy of the slice
  // without tensor parallelism). For a part of the model (part()), the part's tensors whole, laid
  // out as make_layout(shape, {}, part()).
  std::vector<Real> whole_from_slices(std::span<const Real> slice) const;
  Recompute recompute() const { return recompute_; }
  // Whether the logits are stored in bf16 and training's cross-entropy is fused (the kernels'
  // LayerKernels::fused_classifier: a device in bf16).
  bool bf16_logits() const { return bf16_logits_; }
  virtual std::size_t activation_bytes() const = 0;
  Exec& exec() const { return exec_; }

  // The architecture's initialisation of the whole model (whole_layout(), on the host, whatever
  // the backend); padded vocabulary rows 0. A rank of a tensor-parallel group keeps its
  // slice_of() them, so that every split starts from the same model.
  virtual void init_params(std::span<Real> params, std::uint64_t seed) const = 0;

  // tokens and targets are B x T (T <= seq_len). With targets, adds the mean loss over B x T to
  // *loss_sum, a double in the backend's memory (a training step's, exec/step_scalars.hpp), so
  // nothing waits for it. Keeps activations for backward and probabilities for probs().
  // A part of the model (part()) embeds `tokens` only where it starts the model (otherwise it
  // reads part_input()) and computes the loss only where it ends it.
  virtual void forward_into(SegmentBuffers<Real, S>& buffers, const int* tokens, const int* targets, int B, int T,
                            double* loss_sum) = 0;
  // The same, returning the mean loss on the host (0 without targets): the host waits for it.
  double forward(SegmentBuffers<Real, S>& buffers, const int* tokens, const int* targets, int B, int T);
  // After forward with targets: grads += loss_scale x d(mean loss)/d(params).
  virtual void backward(SegmentBuffers<Real, S>& buffers, Real loss_scale) = 0;

  // The same over the rank's flat buffers (layout()).
  double forward(std::span<const S> params, const int* tokens, const int* targets, int B, int T) {
    FlatBuffers<Real, S> flat(layout_, params);
    return forward(flat, tokens, targets, B, T);
  }
  void backward(std::span<const S> params, std::span<Real> grads, Real loss_scale) {
    FlatBuffers<Real, S> flat(layout_, params, grads);
    backward(flat, loss_scale);
  }

  // The order in which forward and backward call before_forward / before_backward on segments
  // (the embeddings, used again by the LM head, stay in use for the whole pass), so that a
  // strategy can fetch the next segment while this one computes.
  std::vector<std::size_t> forward_order() const;
  std::vector<std::size_t> backward_order() const;

  // The logits of a forward pass without targets over whole flat parameters: B x T rows of
  // vocab_size values (the padded columns left out), on the host. For comparisons with other
  // implementations; training never needs them after the softmax.
  virtual std::vector<Real> logits(std::span<const S> params, const int* tokens, int B, int T) = 0;

  // Next-token probabilities at (b, t) of the last forward (vocab_size entries), on the host.
  virtual std::span<const Real> probs(int b, int t) const = 0;

  // ---- incremental decoding (generation) ----
  // One sequence, fed a few tokens at a time: the keys and values of every position fed so far
  // stay in a cache, so a new token costs one row through the model instead of a pass over the
  // whole context. decode() feeds `count` tokens at positions decoded_length() onward (at most
  // seq_len positions in all) and returns the next-token probabilities after the last of them
  // (vocab_size entries, on the host). Every rank of a sharded strategy's group calls it alike:
  // segments are gathered as in forward. The cache is allocated on the first call and not
  // counted in activation_bytes(). The rows go through in pieces of at most decode_rows_ (the
  // rows a rank keeps between split layers, fewer than seq_len under sequence parallelism with
  // short micro-batches); the cache makes the pieces one pass.
  std::span<const Real> decode(SegmentBuffers<Real, S>& buffers, const int* tokens, int count) {
    for (; count > decode_rows_; tokens += decode_rows_, count -= decode_rows_) decode_piece(buffers, tokens, decode_rows_);
    return decode_piece(buffers, tokens, count);
  }
  int decoded_length() const { return decoded_; }
  // Forget the cached positions: the next decode starts a sequence at position 0.
  virtual void reset_decoding() { decoded_ = 0; }
  // Free the cache too (a training run that samples now and then holds it only while sampling).
  virtual void release_decoding() {
    decoded_ = 0;
    decode_cache_ = Memory();
  }

 protected:
  Model(const ModelShape& shape, Exec& exec, Recompute recompute, TensorGroup tensor, ModelPart part);

  // ---- tensor parallelism: what both architectures do alike (each a plain step when the group is
  // one rank) ----
  // The rows of the token table and LM head this rank holds, the first token among them, and how
  // many of them are real tokens (the padding sits in the last slices).
  int vocab_rows() const { return static_cast<int>(shape_.padded_vocab) / tensor_.split.degree; }
  int vocab_first() const { return tensor_.split.rank * vocab_rows(); }
  int vocab_real() const;
  // `tokens` as this rank's slice of the token table numbers them (a token another rank holds
  // becomes -1: the encoder looks it up as zeros), uploaded to `to` (count ints).
  // Token and target ids reach the backend only through these two, checked against
  // model.vocab_size first: an id outside the vocabulary would make the embedding and the loss
  // read outside their tables, on a GPU as an illegal address reported far from its cause.
  void upload_slice_tokens(int* to, const int* tokens, int count);
  void upload_targets(int* to, const int* targets, int count);
  // The batch of a pass: copies on the host (tokens_ where the part embeds; targets_ of a pass
  // with targets, which backward needs), and the ids the kernels read in the backend's memory
  // (tokens_at_ and targets_at_, `rows` of each, allocated by allocate_batch; the targets where
  // the part ends the model).
  void allocate_batch(std::size_t rows);
  // Takes the kernels' scratch for micro-batches of up to max_batch sequences now
  // (LayerKernels::reserve_scratch, sized by kernel_workload): nothing is allocated inside a step.
  void reserve_kernel_scratch(LayerKernels<Real, S>& kernels, int max_batch) const;
  void take_batch(const int* tokens, const int* targets, int N);
  // The start of a training or evaluation pass of N rows, alike for every family: the rows
  // split as the tensor group says (checked), the batch taken, and the embeddings' segment
  // acquired where the part holds it (for the whole pass: the LM head uses it again). Returns
  // that segment's parameters, or null.
  const S* begin_pass(SegmentBuffers<Real, S>& buffers, const int* tokens, const int* targets, int N);
  std::vector<int> tokens_, targets_;
  Memory batch_memory_;
  int *tokens_at_ = nullptr, *targets_at_ = nullptr;
  // Sums the group's partial results in place (the row-parallel projections' outputs, the
  // input gradients of the column-parallel ones: S; the norms' gradients of split rows: Real).
  template <class T>
  void sum_over_tensor_group(T* data, std::size_t count) {
    if (!tensor_.active()) return;
    tensor_.comm->all_reduce(Buffer::of(std::span<T>(data, count), exec_.before_communication()), ReduceOp::sum);
  }
  // Sequence parallelism (TensorGroup::sequence_parallel), for the pass under way: whether the
  // rows between split layers are split (set by the pass: a training or evaluation forward
  // splits them, decoding does not), and this rank's share of `rows` rows.
  bool rows_split() const { return rows_split_; }
  int local_rows(int rows) const { return rows_split_ ? rows / tensor_.split.degree : rows; }
  // Into a split layer: this rank's rows `local` (rows / degree of `width`) gathered into
  // `whole` when rows are split; else `local` itself (it is whole).
  const S* gather_rows(const S* local, S* whole, std::size_t rows, std::size_t width);
  // Out of a split layer: the group's partial results `whole` (rows x width) summed, this rank's
  // rows into `local` when rows are split (a reduce-scatter); else summed in place (an
  // all-reduce). Returns where the summed rows are.
  S* sum_rows(S* whole, S* local, std::size_t rows, std::size_t width);
  // With rows split, the norms' gradients come from the rank's own rows: `scratch` holds that
  // share for the norm tensors at `offsets` of the segment's gradients G (width each, in that
  // order); summed over the group, it is added to them (micro-batches accumulate).
  void add_split_row_gradients(Real* G, std::initializer_list<std::size_t> offsets, Real* scratch,
                               std::size_t width);
  // ---- the classifier: the LM head and the cross-entropy (both architectures alike) ----
  // Logits are `rows` rows of vocab_rows() columns (this rank's slice of the vocabulary), stored
  // as S, or as bf16 where the kernels fuse the classifier (LayerKernels::fused_classifier):
  // the architectures carve them with carve_logits and hand the same pointer to every call
  // below, which reads it as the kernels store it.
  S* carve_logits(ActivationCarver<Real, S>& take, std::size_t rows) const;
  // logits = in[rows, C] head^T, the head being the vocab_rows() x C rows of `weight`.
  void lm_head(S* logits, const S* in, const S* weight, int rows, int C);
  // The cross-entropy over `rows` rows of logits; losses per row, their sum added to `loss`
  // (exec/layer_kernels.hpp) with targets. Unfused: the logits become probabilities in place. Fused, with targets: they
  // become d(loss)/d(logits) unscaled at once (lm_head_backward applies the scale); without
  // targets, probabilities in bf16. `scratch`: logit_slice_scratch(rows, degree) elements
  // (model/activations.hpp), carved by the architecture with its activations.
  void cross_entropy(S* logits, Real* losses, const int* targets, int rows, Real* scratch, LossSum loss = {});
  // After cross_entropy with targets: the head's backward, din = d(loss)/d(in) x scale
  // (overwritten), dweight += d(loss)/d(head) x scale. Unfused, the probabilities become
  // d(loss)/d(logits) x scale in place first, as the host has always computed them.
  void lm_head_backward(S* din, Real* dweight, S* logits, const S* in, const S* weight, const int* targets, int rows,
                        int C, Real scale);
  // Row `row` of probabilities (vocab_rows() of them) as vocab_size entries of the whole
  // vocabulary on the host: the group's slices gathered.
  std::span<const Real> whole_row_on_host(const S* logits, std::size_t row) const;
  // Rows [first_row, first_row + rows) of logits of this rank's slice as whole rows of
  // vocab_size entries on the host.
  std::vector<Real> whole_logits_on_host(const S* logits, std::size_t rows, std::size_t first_row = 0) const;

  ModelShape shape_;
  TensorGroup tensor_;
  ModelPart part_;
  bool rows_split_ = false;  // the pass under way splits rows (sequence parallelism)
  ParamLayout layout_;
  ParamLayout whole_layout_;
  Exec& exec_;
  Recompute recompute_;
  bool bf16_logits_;  // the kernels' fused classifier: logits stored in bf16
  Memory loss_memory_;   // forward()'s mean loss on its way to the host
  Memory decode_cache_;  // the keys and values (and queries) of the positions decoded so far
  int decoded_ = 0;
  int decode_rows_ = 1;  // the most rows one decode_piece takes (the architecture's carve says)
  // decode() for at most decode_rows_ rows.
  virtual std::span<const Real> decode_piece(SegmentBuffers<Real, S>& buffers, const int* tokens, int count) = 0;

 private:
  LayerKernels<Real, S>& kernels_;
  std::vector<int> slice_tokens_;
  mutable Memory gather_memory_;  // whole rows gathered from the group's slices
  mutable std::vector<Real> whole_row_;
};

// The model of shape.arch, its activations for micro-batches of up to max_batch sequences in
// exec's memory space. Throws Error for an architecture the backend has no kernels for.
// With an active tensor group: this rank's slice of the model (Model::layout()).
template <class Real, class S = Real>
std::unique_ptr<Model<Real, S>> make_model(const ModelShape& shape, int max_batch, Exec& exec = host_exec(),
                                           Recompute recompute = Recompute::none, TensorGroup tensor = {},
                                           ModelPart part = {});

// make_model for one family's class (Gpt2, Llama): what its row in the architecture table
// (model/arch.hpp) builds with.
template <template <class, class> class Family, class Real, class S = Real>
std::unique_ptr<Model<Real, S>> make_family_model(const ModelShape& shape, int max_batch, Exec& exec,
                                                  Recompute recompute, TensorGroup tensor, ModelPart part) {
  return std::make_unique<Family<Real, S>>(shape, max_batch, exec, recompute, tensor, part);
}

// The backend's layer kernels for Real and S: exec's for float; its bf16 storage's for (float,
// Bf16) (Exec::bf16_layer_kernels: the host's reference; throws where the backend has none); the
// host's for double (gradient checks, which run on the host only).
template <class Real, class S = Real>
LayerKernels<Real, S>& layer_kernels_of(Exec& exec);

extern template class Model<float>;
extern template class Model<double>;
extern template class Model<float, Bf16>;

}  // namespace st
