#pragma once
// Llama (model/model.hpp): the architecture of Llama 2/3, SmolLM, TinyLlama (and Mistral without
// its sliding window). Token embedding without positions; n_layer pre-RMSNorm blocks of causal
// grouped-query attention with rotary position embeddings (Hugging Face's rotate-half layout)
// and a SwiGLU MLP; final RMSNorm; the LM head tied to the embedding or a matrix of its own; no
// biases.
//
// Written against the layer-kernel seam (exec/layer_kernels.hpp), as GPT-2: on the host, or on
// one CUDA device (float only), its rotary table and batch copied into the device's memory.
#include <cstdint>
#include <span>
#include <vector>

#include "exec/exec.hpp"
#include "exec/host_llama_kernels.hpp"
#include "model/model.hpp"

namespace st {

template <class Real, class S = Real>
class Llama final : public Model<Real, S> {
 public:
  // With an active tensor group, this rank's slice (model/model.hpp TensorGroup): its query heads
  // and the key/value heads they read, its share of the MLP width and of the vocabulary (of the
  // token table and of the untied LM head alike).
  // With a part (model/layout.hpp ModelPart): its blocks only, the embedding and the head where
  // the part has them.
  Llama(const ModelShape& shape, int max_batch, Exec& exec = host_exec(), Recompute recompute = Recompute::none,
        TensorGroup tensor = {}, ModelPart part = {});
  ~Llama() override;

  using Model<Real, S>::forward;
  using Model<Real, S>::backward;
  std::size_t activation_bytes() const override { return acts_.bytes(); }
  Buffer part_input(std::size_t count) override { return Buffer::of(std::span<S>(x0_, count)); }
  Buffer part_output(std::size_t count) override { return Buffer::of(std::span<S>(block_acts_.back().res3, count)); }
  Buffer part_grad(std::size_t count) override { return Buffer::of(std::span<S>(dres_, count)); }

  // As transformers' LlamaPreTrainedModel: N(0, 0.02) for every matrix and the embedding,
  // RMSNorm weights 1; padded vocabulary rows 0.
  void init_params(std::span<Real> params, std::uint64_t seed) const override;
  void forward_into(SegmentBuffers<Real, S>& buffers, const int* tokens, const int* targets, int B, int T,
                    double* loss_sum) override;
  void backward(SegmentBuffers<Real, S>& buffers, Real loss_scale) override;
  std::vector<Real> logits(std::span<const S> params, const int* tokens, int B, int T) override;
  std::span<const Real> probs(int b, int t) const override;

 private:
  struct BlockOffsets {
    std::size_t attn_norm, qkv, proj, mlp_norm, gate_up, down;
  };
  // A block's activations: its own (kept until its backward) or a working set all blocks share
  // (recomputed). att is null when the probabilities are not kept, lse unless attention is
  // flash attention (which keeps it instead, exec/attention_probs.hpp).
  // Values are S, statistics and probabilities Real.
  struct BlockActs {
    S *ln1, *qkv, *atty, *res2, *ln2, *gate_up, *act, *res3;
    Real *ln1_rstd, *att, *lse, *ln2_rstd;
  };
  void forward_to_logits(SegmentBuffers<Real, S>& buffers, const int* tokens, const int* targets, int B, int T);
  // Block l's forward from its input; without `output` it stops before the MLP's down
  // projection (what backward needs, recomputed).
  void block_forward(std::size_t l, const S* P, const S* in, const BlockActs& a, bool output, int B, int T);
  void block_after_attention(std::size_t l, const S* P, const S* in, const BlockActs& a, bool output, int N);
  AttentionProbs<Real, S> attention_probs(const BlockActs& a) const {
    return {a.att, probs_, dprobs_, heads_at_once_, grouped_gradient_, a.lse, row_dots_, a.atty};
  }

  LayerKernels<Real, S>& k_;
  int max_batch_;
  // The residual stream's width (whole on every rank), then this rank's share of the layers (all
  // of them without tensor parallelism): query heads, key/value heads, q's width, the width of
  // q, k and v together, the MLP's width.
  int C_, NH_, NKV_, hs_, A_, W_, F_;
  int heads_at_once_;
  bool flash_;  // attention is flash attention: no T x T blocks, a log-sum-exp per row kept
  Memory rope_memory_;  // kernels::rope_table's cosines, then its sines, in the backend's memory
  const Real *rope_cos_ = nullptr, *rope_sin_ = nullptr;
  std::size_t wte_, head_, lnf_w_;  // within their segments; head_: the embedding's, or lm_head.w's
  std::vector<BlockOffsets> blocks_;

  Memory acts_;
  std::vector<BlockActs> block_acts_;
  S *x0_, *lnf_, *logits_, *tmp_;
  Real *lnf_rstd_, *losses_;
  Real* cross_entropy_scratch_ = nullptr;  // the vocabulary-parallel cross-entropy's (tensor parallelism)
  RowSplitScratch<Real, S> rows_;  // sequence parallelism's
  S *dres_, *dtmp_, *datty_, *dqkv_, *dff_a_, *dff_b_;
  Real* probs_ = nullptr;
  Real* dprobs_ = nullptr;
  Real* grouped_gradient_ = nullptr;  // the host's per-query-head attention gradient (AttentionProbs)
  Real* row_dots_ = nullptr;          // flash attention's backward scratch (AttentionProbs::row_dots)

  int B_ = 0, T_ = 0;

  // Decoding: the cache holds n_layer x seq_len rows of q, k, v (d_model + 2 n_kv_head head_dim
  // values: with grouped-query attention n_kv_head / n_head of multi-head attention's keys and values;
  // under tensor parallelism this rank's heads' share of them).
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

extern template class Llama<float>;
extern template class Llama<double>;
extern template class Llama<float, Bf16>;

}  // namespace st
