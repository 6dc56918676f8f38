#pragma once
// GPT-2 (model/model.hpp): forward and backward by hand over the flat parameter layout, on an
// execution backend (exec/exec.hpp): the host, or one CUDA device.
//
// Architecture (as GPT-2): token + learned position embeddings; n_layer pre-LayerNorm blocks of
// causal multi-head self-attention and a 4x MLP with tanh-GELU; final LayerNorm; LM head tied to
// the token embedding.
#include <cstdint>
#include <span>
#include <vector>

#include "exec/exec.hpp"
#include "model/activations.hpp"
#include "model/hooks.hpp"
#include "model/layout.hpp"
#include "model/model.hpp"

namespace st {

template <class Real, class S = Real>
class Gpt2 final : public Model<Real, S> {
 public:
  // Activations in `exec`'s memory space, kernels of that backend (double: the host only; bf16
  // storage, S = Bf16: where the backend has such kernels, Exec::bf16_layer_kernels);
  // what backward recomputes rather than keeps (model/activations.hpp).
  // With an active tensor group, this rank's slice (model/model.hpp TensorGroup): its heads, its
  // share of the MLP width and of the vocabulary.
  // With a part (model/layout.hpp ModelPart): its blocks only, the embedding and the head where
  // the part has them.
  Gpt2(const ModelShape& shape, int max_batch, Exec& exec = host_exec(), Recompute recompute = Recompute::none,
       TensorGroup tensor = {}, ModelPart part = {});
  // Out of line: inlined into callers, GCC 12 warns falsely about freeing its vectors.
  ~Gpt2() override;

  using Model<Real, S>::forward;
  using Model<Real, S>::backward;
  std::size_t activation_bytes() const override { return acts_.bytes(); }
  Buffer part_input(std::size_t count) override { return Buffer::of(std::span<S>(x0_, count)); }
  Buffer part_output(std::size_t count) override { return Buffer::of(std::span<S>(block_acts_.back().res3, count)); }
  Buffer part_grad(std::size_t count) override { return Buffer::of(std::span<S>(dres_, count)); }

  // GPT-2 initialisation: N(0, 0.02) for matrices and embeddings, residual projections scaled by
  // 1/sqrt(2 n_layer), biases 0, LayerNorm weights 1; padded vocabulary rows 0.
  void init_params(std::span<Real> params, std::uint64_t seed) const override;
  void forward_into(SegmentBuffers<Real, S>& buffers, const int* tokens, const int* targets, int B, int T,
                    double* loss_sum) override;
  void backward(SegmentBuffers<Real, S>& buffers, Real loss_scale) override;
  std::vector<Real> logits(std::span<const S> params, const int* tokens, int B, int T) override;
  std::span<const Real> probs(int b, int t) const override;

 private:
  // Forward up to the LM head: logits_ holds B x T rows of padded_vocab logits.
  void forward_to_logits(SegmentBuffers<Real, S>& buffers, const int* tokens, const int* targets, int B, int T);

  struct BlockOffsets {
    std::size_t ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  };
  // Where a block's activations are: its own (kept until its backward) or a working set that
  // every block shares (recomputed in backward). att is null when the probabilities are not kept,
  // lse unless attention is flash attention (which keeps it instead, exec/attention_probs.hpp).
  // Values are S, statistics and probabilities Real.
  struct BlockActs {
    S *ln1, *qkv, *atty, *res2, *ln2, *fch, *fch_gelu, *res3;
    Real *ln1_mean, *ln1_rstd, *att, *lse, *ln2_mean, *ln2_rstd;
  };
  // Block l's forward from its input; without `output` it stops before the MLP's projection
  // (what backward needs, recomputed).
  void block_forward(std::size_t l, const S* P, const S* in, const BlockActs& a, bool output, int B, int T);
  // The block after attention: its projection and residual, then the MLP (N rows).
  void block_after_attention(std::size_t l, const S* P, const S* in, const BlockActs& a, bool output, int N);
  // Block l's forward for `count` new positions of the decoded sequence, their q, k, v rows
  // written into the layer's cache.
  void block_decode(std::size_t l, const S* P, const S* in, const BlockActs& a, int count);
  // The bias a row-parallel projection adds: on the group's first rank only, as the group sums
  // the partial products after it.
  const S* row_parallel_bias(const S* bias) const { return tensor_.split.rank == 0 ? bias : nullptr; }
  AttentionProbs<Real, S> attention_probs(const BlockActs& a) const {
    return {a.att, probs_, dprobs_, heads_at_once_, nullptr, a.lse, row_dots_, a.atty};
  }

  LayerKernels<Real, S>& k_;
  int max_batch_;
  // This rank's share of the layers (all of them without tensor parallelism): attention heads
  // and their width, the MLP's width.
  int heads_, attn_width_, mlp_width_;
  int heads_at_once_;
  bool flash_;  // attention is flash attention: no T x T blocks, a log-sum-exp per row kept
  // Offsets within the owning segment: embeddings (wte, wpe), final norm (lnf), blocks.
  std::size_t wte_, wpe_, lnfw_, lnfb_;
  std::vector<BlockOffsets> blocks_;

  Memory acts_;  // every activation, one allocation
  std::vector<BlockActs> block_acts_;
  S *x0_, *lnf_, *logits_, *tmp_;
  Real *lnf_mean_, *lnf_rstd_, *losses_;
  Real* cross_entropy_scratch_ = nullptr;  // the vocabulary-parallel cross-entropy's (tensor parallelism)
  RowSplitScratch<Real, S> rows_;  // sequence parallelism's

  // backward scratch
  S *dres_, *dtmp_, *datty_, *dqkv_, *d4c_a_, *d4c_b_;
  Real* probs_ = nullptr;   // attention probabilities in flight, when blocks do not keep them
  Real* dprobs_ = nullptr;  // their gradient in backward
  Real* row_dots_ = nullptr;  // flash attention's backward scratch (AttentionProbs::row_dots)

  int B_ = 0, T_ = 0;

  // Decoding (decode_cache_): per layer seq_len rows of q, k, v as the qkv matmul writes them (q
  // is kept too, so the matmul writes straight into the cache and the attention reads it with no
  // copy). The cache holds n_layer x seq_len x 3 d_model values.
  std::span<const Real> decode_piece(SegmentBuffers<Real, S>& buffers, const int* tokens, int count) override;
  using Model<Real, S>::shape_;
  using Model<Real, S>::tensor_;
  using Model<Real, S>::part_;
  using Model<Real, S>::tokens_;
  using Model<Real, S>::targets_;
  using Model<Real, S>::tokens_at_;
  using Model<Real, S>::targets_at_;
  using Model<Real, S>::rows_split_;
  using Model<Real, S>::layout_;
  using Model<Real, S>::exec_;
  using Model<Real, S>::recompute_;
  using Model<Real, S>::decode_cache_;
  using Model<Real, S>::decoded_;
  using Model<Real, S>::decode_rows_;
};

extern template class Gpt2<float>;
extern template class Gpt2<double>;
extern template class Gpt2<float, Bf16>;

}  // namespace st
