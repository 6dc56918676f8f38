#pragma once
// The layer kernels of GPT-2 and Llama behind one seam: the models (model/gpt2.hpp,
// model/llama.hpp) are written once against this interface, and each execution backend
// implements it: the host with OpenMP and BLAS (exec/host_kernels.hpp and
// exec/host_llama_kernels.hpp, the reference), CUDA with kernels of its own and cuBLAS
// (exec/cuda/cuda_layer_kernels.cu, cuda_llama_kernels.cu, cuda_attention.cu). Pointers are in
// the backend's memory space; calls on a device are ordered on its compute stream and return
// before the work is done. Nothing comes back to the host: the loss is added to a double in the
// backend's memory (LossSum).
//
// Shapes use N = rows (batch x time), C = channels. Backward kernels accumulate (+=) into
// parameter gradients, so micro-batches add up without extra buffers. The meaning of every
// argument is that of the host kernel of the same name in exec/host_kernels.hpp or
// exec/host_llama_kernels.hpp, except where a comment here says otherwise.
#include <cstddef>

#include "core/bf16.hpp"
#include "exec/attention_probs.hpp"
#include "exec/kernel_scratch.hpp"

namespace st {

// Where a cross-entropy's loss goes: (the sum of the rows' losses) / divisor is added to *total,
// a double in the backend's memory. Passes without targets give no loss and may leave total null.
struct LossSum {
  double* total = nullptr;
  double divisor = 1;
};

// R and S: a backend's kernels for one pair of types. S is what parameters, activations and
// activations' gradients are stored in; R is what parameters' gradients (accumulated over
// micro-batches), per-row statistics (a norm's mean and reciprocal deviation, the log-sum-exp,
// the losses, the vocabulary-parallel cross-entropy's statistics), rotary tables and the loss's
// scale are kept in. fp32 and the host's gradient checks in double store what they compute (S =
// R). bf16 storage (S = Bf16, R = float: exec/host_bf16_kernels.hpp, the GPU's reference) computes
// in fp32 inside each kernel, reading bf16 and rounding what it stores once, to nearest even.
// Attention's probabilities (the exact path's T x T blocks) are R: statistics, not activations.
template <class R, class S = R>
class LayerKernels {
 public:
  virtual ~LayerKernels() = default;

  // Takes now the scratch memory these kernels will ask for at most for `workload` (a model's,
  // exec/kernel_scratch.hpp), so that none is allocated inside a step. The host needs none.
  virtual void reserve_scratch(const KernelWorkload& workload) { (void)workload; }

  virtual void encoder_forward(S* out, const int* tokens, const S* wte, const S* wpe, int B, int T, int C) = 0;
  virtual void encoder_backward(R* dwte, R* dwpe, const S* dout, const int* tokens, int B, int T, int C) = 0;
  virtual void layernorm_forward(S* out, R* mean, R* rstd, const S* in, const S* weight, const S* bias, int N,
                                 int C) = 0;
  virtual void layernorm_backward(S* din, R* dweight, R* dbias, const S* dout, const S* in, const S* weight,
                                  const R* mean, const R* rstd, int N, int C) = 0;
  // A residual add and the LayerNorm after it (the MLP's input in a block): res = a + b, then
  // layernorm_forward of res. These compose add and layernorm_forward; a device fuses them (res
  // is written once, and the norm reads each warp's own writes rather than memory another kernel
  // wrote). The norm reads the sum as stored (rounded, in bf16 storage). The backward needs no
  // counterpart: layernorm_backward adds din into the residual's gradient.
  virtual void residual_layernorm_forward(S* res, S* out, R* mean, R* rstd, const S* a, const S* b, const S* weight,
                                          const S* bias, int N, int C) {
    add(res, a, b, std::size_t{1} * N * C);
    layernorm_forward(out, mean, rstd, res, weight, bias, N, C);
  }
  virtual void linear_forward(S* out, const S* in, const S* weight, const S* bias, int N, int C, int OC) = 0;
  virtual void linear_backward(S* din, R* dweight, R* dbias, const S* dout, const S* in, const S* weight, int N, int C,
                               int OC, bool accumulate_din) = 0;
  // A linear layer and GELU after it (GPT-2's MLP input): pre = in weight^T + bias, out =
  // gelu(pre). These compose linear_forward and gelu_forward; a device fuses them.
  virtual void linear_gelu_forward(S* out, S* pre, const S* in, const S* weight, const S* bias, int N, int C, int OC) {
    linear_forward(pre, in, weight, bias, N, C, OC);
    gelu_forward(out, pre, std::size_t{1} * N * OC);
  }
  // The backward of a linear layer whose input `in` was gelu(pre), on through the GELU: dpre =
  // (dout weight) * gelu'(pre), dweight and dbias accumulated as linear_backward does. `scratch`
  // ([N, C]) may hold the input's gradient on the way; `in` may be dpre's memory (it is read
  // first). These compose linear_backward and gelu_backward; a device fuses them.
  virtual void linear_backward_gelu(S* dpre, S* scratch, R* dweight, R* dbias, const S* dout, const S* in, const S* pre,
                                    const S* weight, int N, int C, int OC) {
    linear_backward(scratch, dweight, dbias, dout, in, weight, N, C, OC, false);
    gelu_backward(dpre, pre, scratch, std::size_t{1} * N * C);
  }
  // Heads in flight at once (blocks in AttentionProbs::working and dworking) for B sequences.
  virtual int attention_heads_at_once(int B, int NH) const = 0;
  // Whether training attention on heads `head_dim` wide runs flash attention (st::attention_uses_flash):
  // then forward keeps AttentionProbs::lse, backward reads lse, row_dots and out, and kept,
  // working and dworking are not used.
  virtual bool attention_uses_flash(int head_dim) const = 0;
  // Causal attention over qkv rows of W = C + 2 NKV hs values (hs = C / NH): q's NH heads, then
  // k's and v's NKV heads; query head h attends with key/value head h / (NH / NKV). NKV = NH is
  // GPT-2's multi-head attention (W = 3C), NKV < NH grouped-query attention.
  virtual void attention_forward(S* out, const AttentionProbs<R, S>& probs, const S* qkv, int B, int T, int C, int NH,
                                 int NKV) = 0;
  // dqkv has qkv's layout (rows W wide) and is overwritten: the gradient of q, and of each
  // key/value head summed over the query heads of its group (unlike the host kernel of the same
  // name, which leaves a gradient per query head for kernels::gqa_fold). A backend that folds
  // (the host) does so through probs.grouped_gradient (grouped_gradient_elements).
  virtual void attention_backward(S* dqkv, const AttentionProbs<R, S>& probs, const S* dout, const S* qkv, int B, int T,
                                  int C, int NH, int NKV) = 0;
  // Incremental decoding: the attention of query positions first..first+n-1 of one sequence over
  // keys 0..their own position, from qkv rows [0, first + n) (a key/value cache filled row by
  // row, laid out as attention_forward's); out is n x C. Keeps nothing for backward.
  virtual void attention_rows(S* out, const S* qkv, int first, int n, int C, int NH, int NKV) = 0;
  virtual void gelu_forward(S* out, const S* in, std::size_t n) = 0;
  virtual void gelu_backward(S* din, const S* in, const S* dout, std::size_t n) = 0;
  virtual void add(S* out, const S* a, const S* b, std::size_t n) = 0;
  virtual void softmax_cross_entropy_forward(S* logits_to_probs, R* losses, const int* targets, int N, int V, int Vp,
                                             LossSum loss) = 0;
  virtual void softmax_cross_entropy_backward(S* probs_to_dlogits, const int* targets, int N, int V, int Vp,
                                              R scale) = 0;
  // Vocabulary-parallel cross-entropy (exec/host_kernels.hpp logit_slice_*): the combine gives
  // the loss, as softmax_cross_entropy_forward does.
  virtual void logit_slice_stats(const S* logits, const int* targets, R* stats, int N, int V, int Vp, int first) = 0;
  virtual void logit_slices_combine(const R* gathered, R* row_stats, R* losses, const int* targets, int N, int parts,
                                    LossSum loss) = 0;
  virtual void logit_slice_softmax(S* logits_to_probs, const R* row_stats, int N, int V, int Vp) = 0;
  virtual void logit_slice_backward(S* probs_to_dlogits, const int* targets, int N, int V, int Vp, int first,
                                    R scale) = 0;

  // ---- the classifier: the LM head's logits in bf16 and a fused cross-entropy ----
  // Whether the models store their logits in bf16 and fuse training's cross-entropy (llm.c's
  // fused_classifier; exec/classifier_reference.hpp is the contract): a device in bf16. Then the
  // LM head is classifier_logits, a training pass's loss and d(loss)/d(logits) come from one
  // kernel (classifier_cross_entropy, or under tensor parallelism classifier_slice_stats,
  // logit_slices_combine and classifier_slice_dlogits) with the loss's scale left to
  // classifier_backward, and passes without targets normalise in bf16 (classifier_softmax,
  // classifier_slice_softmax). Otherwise logits are S, through linear_forward and the
  // softmax_cross_entropy_* and logit_slice_* kernels above. The host implements both (the fused
  // ones as the reference), so a test backend can claim either.
  virtual bool fused_classifier() const { return false; }
  virtual void classifier_logits(Bf16* logits, const S* in, const S* weight, int N, int C, int OC) = 0;
  virtual void classifier_cross_entropy(Bf16* logits_to_dlogits, R* losses, const int* targets, int N, int V, int Vp,
                                        LossSum loss) = 0;
  virtual void classifier_slice_stats(const Bf16* logits, const int* targets, R* stats, int N, int V, int Vp,
                                      int first) = 0;
  virtual void classifier_slice_dlogits(Bf16* logits_to_dlogits, const R* row_stats, const int* targets, int N, int V,
                                        int Vp, int first) = 0;
  virtual void classifier_softmax(Bf16* logits_to_probs, int N, int V, int Vp) = 0;
  virtual void classifier_slice_softmax(Bf16* logits_to_probs, const R* row_stats, int N, int V, int Vp) = 0;
  virtual void classifier_backward(S* din, R* dweight, const Bf16* dlogits, const S* in, const S* weight, int N, int C,
                                   int OC, R scale) = 0;

  // Llama's kernels (exec/host_llama_kernels.hpp).
  virtual void rmsnorm_forward(S* out, R* rstd, const S* in, const S* weight, int N, int C, double eps) = 0;
  virtual void rmsnorm_backward(S* din, R* dweight, const S* dout, const S* in, const S* weight, const R* rstd, int N,
                                int C) = 0;
  // res = a + b, then rmsnorm_forward of res: residual_layernorm_forward's counterpart.
  virtual void residual_rmsnorm_forward(S* res, S* out, R* rstd, const S* a, const S* b, const S* weight, int N, int C,
                                        double eps) {
    add(res, a, b, std::size_t{1} * N * C);
    rmsnorm_forward(out, rstd, res, weight, N, C, eps);
  }
  // cosines and sines: kernels::rope_table's two tables ([positions, hs / 2] each), copied into the
  // backend's memory.
  virtual void rope(S* x, const R* cosines, const R* sines, int B, int T, int first, int W, int heads, int hs,
                    bool inverse) = 0;
  virtual void swiglu_forward(S* out, const S* in, int N, int F) = 0;
  virtual void swiglu_backward(S* din, const S* in, const S* dout, int N, int F) = 0;
};

// The host implementation: the OpenMP/BLAS kernels of exec/host_kernels.hpp and
// exec/host_llama_kernels.hpp. Not final: the unit tests stand in a device's attention choice
// and its fused classifier with it (tests/unit/flash_carving_exec.hpp,
// tests/unit/fused_classifier_exec.hpp).
template <class R>
class HostLayerKernels : public LayerKernels<R> {
 public:
  void encoder_forward(R* out, const int* tokens, const R* wte, const R* wpe, int B, int T, int C) override;
  void encoder_backward(R* dwte, R* dwpe, const R* dout, const int* tokens, int B, int T, int C) override;
  void layernorm_forward(R* out, R* mean, R* rstd, const R* in, const R* weight, const R* bias, int N,
                         int C) override;
  void layernorm_backward(R* din, R* dweight, R* dbias, const R* dout, const R* in, const R* weight, const R* mean,
                          const R* rstd, int N, int C) override;
  void linear_forward(R* out, const R* in, const R* weight, const R* bias, int N, int C, int OC) override;
  void linear_backward(R* din, R* dweight, R* dbias, const R* dout, const R* in, const R* weight, int N, int C, int OC,
                       bool accumulate_din) override;
  int attention_heads_at_once(int B, int NH) const override;
  bool attention_uses_flash(int) const override { return false; }  // the host keeps its exact attention
  void attention_forward(R* out, const AttentionProbs<R>& probs, const R* qkv, int B, int T, int C, int NH,
                         int NKV) override;
  // With NKV < NH, the host kernel's per-query-head gradient goes to probs.grouped_gradient,
  // then kernels::gqa_fold sums each group's into dqkv.
  void attention_backward(R* dqkv, const AttentionProbs<R>& probs, const R* dout, const R* qkv, int B, int T, int C,
                          int NH, int NKV) override;
  void attention_rows(R* out, const R* qkv, int first, int n, int C, int NH, int NKV) override;
  void gelu_forward(R* out, const R* in, std::size_t n) override;
  void gelu_backward(R* din, const R* in, const R* dout, std::size_t n) override;
  void add(R* out, const R* a, const R* b, std::size_t n) override;
  void softmax_cross_entropy_forward(R* logits_to_probs, R* losses, const int* targets, int N, int V, int Vp,
                                     LossSum loss) override;
  void softmax_cross_entropy_backward(R* probs_to_dlogits, const int* targets, int N, int V, int Vp,
                                      R scale) override;
  void logit_slice_stats(const R* logits, const int* targets, R* stats, int N, int V, int Vp, int first) override;
  void logit_slices_combine(const R* gathered, R* row_stats, R* losses, const int* targets, int N, int parts,
                            LossSum loss) override;
  void logit_slice_softmax(R* logits_to_probs, const R* row_stats, int N, int V, int Vp) override;
  void logit_slice_backward(R* probs_to_dlogits, const int* targets, int N, int V, int Vp, int first,
                            R scale) override;
  // The fused classifier as exec/classifier_reference.hpp computes it; fused_classifier() stays
  // false: the host trains with the unfused kernels.
  void classifier_logits(Bf16* logits, const R* in, const R* weight, int N, int C, int OC) override;
  void classifier_cross_entropy(Bf16* logits_to_dlogits, R* losses, const int* targets, int N, int V, int Vp,
                                LossSum loss) override;
  void classifier_slice_stats(const Bf16* logits, const int* targets, R* stats, int N, int V, int Vp,
                              int first) override;
  void classifier_slice_dlogits(Bf16* logits_to_dlogits, const R* row_stats, const int* targets, int N, int V, int Vp,
                                int first) override;
  void classifier_softmax(Bf16* logits_to_probs, int N, int V, int Vp) override;
  void classifier_slice_softmax(Bf16* logits_to_probs, const R* row_stats, int N, int V, int Vp) override;
  void classifier_backward(R* din, R* dweight, const Bf16* dlogits, const R* in, const R* weight, int N, int C, int OC,
                           R scale) override;
  void rmsnorm_forward(R* out, R* rstd, const R* in, const R* weight, int N, int C, double eps) override;
  void rmsnorm_backward(R* din, R* dweight, const R* dout, const R* in, const R* weight, const R* rstd, int N,
                        int C) override;
  void rope(R* x, const R* cosines, const R* sines, int B, int T, int first, int W, int heads, int hs,
            bool inverse) override;
  void swiglu_forward(R* out, const R* in, int N, int F) override;
  void swiglu_backward(R* din, const R* in, const R* dout, int N, int F) override;
};

extern template class HostLayerKernels<float>;
extern template class HostLayerKernels<double>;

}  // namespace st
