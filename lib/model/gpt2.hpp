#pragma once
// GPT-2: forward and backward by hand over the flat parameter layout, on an execution backend
// (exec/exec.hpp): the host, or one CUDA device.
//
// Architecture (as GPT-2): token + learned position embeddings; n_layer pre-LayerNorm blocks of
// causal multi-head self-attention and a 4x MLP with tanh-GELU; final LayerNorm; LM head tied to
// the token embedding. Parameters and gradients are flat buffers owned by the caller (the
// parallel strategy), laid out by make_gpt2_layout, in the backend's memory space; this class owns
// only activations (in the same space) and its copies of the batch's tokens.
#include <cstdint>
#include <span>
#include <vector>

#include "exec/exec.hpp"
#include "model/activations.hpp"
#include "model/hooks.hpp"
#include "model/layout.hpp"

namespace st {

template <class Real>
class Gpt2 {
 public:
  // Activations in `exec`'s memory space, kernels of that backend (double: the host only);
  // what backward recomputes rather than keeps (model/activations.hpp).
  Gpt2(const Gpt2Shape& shape, int max_batch, Exec& exec = host_exec(), Recompute recompute = Recompute::none);
  // Out of line: inlined into callers, GCC 12 warns falsely about freeing its vectors.
  ~Gpt2();

  const Gpt2Shape& shape() const { return shape_; }
  const ParamLayout& layout() const { return layout_; }
  Recompute recompute() const { return recompute_; }
  std::size_t activation_bytes() const { return acts_.bytes(); }
  Exec& exec() const { return exec_; }

  // GPT-2 initialisation (on the host, whatever the backend): N(0, 0.02) for matrices and embeddings, residual projections scaled by
  // 1/sqrt(2 n_layer), biases 0, LayerNorm weights 1; padded vocabulary rows 0.
  void init_params(std::span<Real> params, std::uint64_t seed) const;

  // tokens and targets are B x T (T <= seq_len). Returns the mean loss over B x T (0 without
  // targets). Keeps activations for backward and probabilities for probs().
  double forward(SegmentBuffers<Real>& buffers, const int* tokens, const int* targets, int B, int T);
  // After forward with targets: grads += loss_scale x d(mean loss)/d(params).
  void backward(SegmentBuffers<Real>& buffers, Real loss_scale);

  // The same over whole flat buffers.
  double forward(std::span<const Real> params, const int* tokens, const int* targets, int B, int T) {
    FlatBuffers<Real> flat(layout_, params);
    return forward(flat, tokens, targets, B, T);
  }
  void backward(std::span<const Real> params, std::span<Real> grads, Real loss_scale) {
    FlatBuffers<Real> flat(layout_, params, grads);
    backward(flat, loss_scale);
  }

  // The order in which forward and backward call before_forward / before_backward on segments
  // (the embeddings, used again by the tied LM head, stay in use for the whole pass), so that a
  // strategy can fetch the next segment while this one computes.
  std::vector<std::size_t> forward_order() const;
  std::vector<std::size_t> backward_order() const;

  // The logits of a forward pass without targets over whole flat parameters: B x T rows of
  // vocab_size values (the padded columns left out), on the host. For comparisons with other
  // implementations; training never needs them after the softmax.
  std::vector<Real> logits(std::span<const Real> params, const int* tokens, int B, int T);

  // Next-token probabilities at (b, t) of the last forward (vocab_size entries), on the host.
  std::span<const Real> probs(int b, int t) const;

  // ---- incremental decoding (generation) ----
  // One sequence, fed a few tokens at a time: the keys and values of every position fed so far
  // stay in a cache, so a new token costs one row through the model instead of a pass over the
  // whole context. decode() feeds `count` tokens at positions decoded_length() onward (at most
  // seq_len positions in all) and returns the next-token probabilities after the last of them
  // (vocab_size entries, on the host). Every rank of a sharded strategy's group calls it alike:
  // segments are gathered as in forward. The cache (n_layer x seq_len x 3 d_model values) is
  // allocated on the first call and not counted in activation_bytes().
  std::span<const Real> decode(SegmentBuffers<Real>& buffers, const int* tokens, int count);
  int decoded_length() const { return decoded_; }
  // Forget the cached positions: the next decode starts a sequence at position 0.
  void reset_decoding() { decoded_ = 0; }
  // Free the cache too (a training run that samples now and then holds it only while sampling).
  void release_decoding() {
    decoded_ = 0;
    decode_cache_ = Memory();
  }

 private:
  // Forward up to the LM head: logits_ holds B x T rows of padded_vocab logits.
  void forward_to_logits(SegmentBuffers<Real>& buffers, const int* tokens, const int* targets, int B, int T);

  struct BlockOffsets {
    std::size_t ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  };
  // Where a block's activations are: its own (kept until its backward) or a working set that
  // every block shares (recomputed in backward). att is null when the probabilities are not kept.
  struct BlockActs {
    Real *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *res3;
  };
  // Block l's forward from its input; without `output` it stops before the MLP's projection
  // (what backward needs, recomputed).
  void block_forward(std::size_t l, const Real* P, const Real* in, const BlockActs& a, bool output, int B, int T);
  // The block after attention: its projection and residual, then the MLP (N rows).
  void block_after_attention(std::size_t l, const Real* P, const Real* in, const BlockActs& a, bool output, int N);
  // Block l's forward for `count` new positions of the decoded sequence, their q, k, v rows
  // written into the layer's cache.
  void block_decode(std::size_t l, const Real* P, const Real* in, const BlockActs& a, int count);
  // A row of logits_ as probabilities on the host (a device's copied into probs_row_).
  std::span<const Real> row_on_host(const Real* row) const;
  AttentionProbs<Real> attention_probs(const BlockActs& a) const { return {a.att, probs_, dprobs_, heads_at_once_}; }

  Gpt2Shape shape_;
  ParamLayout layout_;
  Exec& exec_;
  LayerKernels<Real>& k_;
  int max_batch_;
  Recompute recompute_;
  int heads_at_once_;
  // Offsets within the owning segment: embeddings (wte, wpe), final norm (lnf), blocks.
  std::size_t wte_, wpe_, lnfw_, lnfb_;
  std::vector<BlockOffsets> blocks_;

  Memory acts_;  // every activation, one allocation
  std::vector<BlockActs> block_acts_;
  Real *x0_, *lnf_, *lnf_mean_, *lnf_rstd_, *logits_, *losses_, *tmp_;
  // backward scratch
  Real *dres_, *dtmp_, *datty_, *dqkv_, *d4c_a_, *d4c_b_;
  Real* probs_ = nullptr;   // attention probabilities in flight, when blocks do not keep them
  Real* dprobs_ = nullptr;  // their gradient in backward

  std::vector<int> tokens_, targets_;  // copies from the last forward
  Memory batch_memory_;                // the same in the backend's space (tokens, then targets)
  int *tokens_at_ = nullptr, *targets_at_ = nullptr;
  mutable std::vector<Real> probs_row_;  // probs() of a device run, copied to the host
  int B_ = 0, T_ = 0;

  // Decoding: per layer seq_len rows of q, k, v as the qkv matmul writes them (q is kept too, so
  // the matmul writes straight into the cache and the attention reads it with no copy).
  Memory decode_cache_;
  int decoded_ = 0;
};

extern template class Gpt2<float>;
extern template class Gpt2<double>;

}  // namespace st
