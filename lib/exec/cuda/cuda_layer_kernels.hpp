#pragma once
// The layer kernels of GPT-2 and Llama on one CUDA device (exec/layer_kernels.hpp): kernels of
// our own for the element-wise, normalisation, rotary and softmax work, cuBLAS for every matmul
// (cuda_layer_kernels.cu, cuda_llama_kernels.cu, cuda_attention.cu) but flash attention's, which
// are its own kernels' (flash_attention.cu), and the fused classifier's cross-entropy
// (classifier.cu). All work is queued on one stream and nothing waits for it: the loss is added
// to a double on the device (LossSum).
//
// Deterministic: the same inputs give the same bits on every run on the same device. No kernel
// uses floating-point atomics; every reduction (over a row, over rows for parameter gradients,
// over the batch for the loss) runs in a fixed order that depends only on the shapes.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "exec/cuda/bf16_matmuls.hpp"
#include "exec/cuda/cuda_kernel_context.hpp"
#include "exec/layer_kernels.hpp"

namespace st {

class CudaLayerKernels final : public LayerKernels<float> {
 public:
  // Work goes to `device` (made current on each call: callers may be on any thread) and `stream`.
  // `flash_attention`: with bf16 matmuls, attention runs flash attention where the head width
  // has a kernel (attention_uses_flash); otherwise, and always in fp32, the exact path.
  // `fused_classifier`: with bf16 matmuls, bf16 logits and the fused cross-entropy
  // (fused_classifier()); otherwise, and always in fp32, fp32 logits and the unfused kernels.
  // `gelu_fusion`: with bf16 matmuls, GPT-2's GELU in cuBLASLt's epilogues where it has an
  // algorithm (linear_gelu_forward, linear_backward_gelu); otherwise the separate kernels.
  CudaLayerKernels(int device, cudaStream_t stream, cublasHandle_t cublas, bool bf16_matmuls, bool flash_attention,
                   bool fused_classifier, bool gelu_fusion = false)
      : ctx_(device, stream, cublas),
        bf16_(bf16_matmuls),
        flash_(bf16_matmuls && flash_attention),
        fused_(bf16_matmuls && fused_classifier),
        gelu_fusion_(bf16_matmuls && gelu_fusion),
        bf16_matmuls_(stream, cublas) {}

  // Every scratch block at kernel_scratch's size for the workload with this backend's choices
  // (cub's own figure for the token sort); a block only grows, so a second model takes the larger.
  void reserve_scratch(const KernelWorkload& workload) override;
  // What reserve_scratch took, block by block (the largest asked where several models share these
  // kernels), cub's sort figure included: tests compare it with kernel_scratch.
  const KernelScratch& reserved_scratch() const { return ctx_.reserved; }
  void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T,
                       int C) override;
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C) override;
  void layernorm_forward(float* out, float* mean, float* rstd, const float* in, const float* weight, const float* bias,
                         int N, int C) override;
  // One kernel: the residual's sum is written once and normalised from the lane's own writes.
  void residual_layernorm_forward(float* res, float* out, float* mean, float* rstd, const float* a, const float* b,
                                  const float* weight, const float* bias, int N, int C) override;
  // One pass over dout and in for the input's gradient and the parameters' chunk sums, then the
  // chunks added in order (as RMSNorm's below).
  void layernorm_backward(float* din, float* dweight, float* dbias, const float* dout, const float* in,
                          const float* weight, const float* mean, const float* rstd, int N, int C) override;
  void linear_forward(float* out, const float* in, const float* weight, const float* bias, int N, int C,
                      int OC) override;
  void linear_backward(float* din, float* dweight, float* dbias, const float* dout, const float* in,
                       const float* weight, int N, int C, int OC, bool accumulate_din) override;
  // With gelu_fusion: cuBLASLt's GELU epilogues where it has an algorithm
  // (Bf16Matmuls::forward_gelu, backward_dgelu); else the composition (the backward still
  // rounds dout once and takes the bias gradient in that pass).
  void linear_gelu_forward(float* out, float* pre, const float* in, const float* weight, const float* bias, int N,
                           int C, int OC) override;
  void linear_backward_gelu(float* dpre, float* scratch, float* dweight, float* dbias, const float* dout,
                            const float* in, const float* pre, const float* weight, int N, int C, int OC) override;
  int attention_heads_at_once(int B, int NH) const override;
  bool attention_uses_flash(int head_dim) const override { return st::attention_uses_flash(flash_, head_dim); }
  void attention_forward(float* out, const AttentionProbs<float>& probs, const float* qkv, int B, int T, int C, int NH,
                         int NKV) override;
  void attention_backward(float* dqkv, const AttentionProbs<float>& probs, const float* dout, const float* qkv, int B,
                          int T, int C, int NH, int NKV) override;
  void attention_rows(float* out, const float* qkv, int first, int n, int C, int NH, int NKV) override;
  void gelu_forward(float* out, const float* in, std::size_t n) override;
  void gelu_backward(float* din, const float* in, const float* dout, std::size_t n) override;
  void add(float* out, const float* a, const float* b, std::size_t n) override;
  void softmax_cross_entropy_forward(float* logits_to_probs, float* losses, const int* targets, int N, int V, int Vp,
                                     LossSum loss) override;
  void softmax_cross_entropy_backward(float* probs_to_dlogits, const int* targets, int N, int V, int Vp,
                                      float scale) override;
  void logit_slice_stats(const float* logits, const int* targets, float* stats, int N, int V, int Vp,
                         int first) override;
  void logit_slices_combine(const float* gathered, float* row_stats, float* losses, const int* targets, int N,
                            int parts, LossSum loss) override;
  void logit_slice_softmax(float* logits_to_probs, const float* row_stats, int N, int V, int Vp) override;
  void logit_slice_backward(float* probs_to_dlogits, const int* targets, int N, int V, int Vp, int first,
                            float scale) override;
  // With bf16 matmuls (unless the constructor was told otherwise) the models keep their logits
  // in bf16 and train through these (exec/classifier_reference.hpp, classifier.cu); in fp32 they
  // keep the kernels above.
  bool fused_classifier() const override { return fused_; }
  void classifier_logits(Bf16* logits, const float* in, const float* weight, int N, int C, int OC) override;
  void classifier_cross_entropy(Bf16* logits_to_dlogits, float* losses, const int* targets, int N, int V, int Vp,
                                LossSum loss) override;
  void classifier_slice_stats(const Bf16* logits, const int* targets, float* stats, int N, int V, int Vp,
                              int first) override;
  void classifier_slice_dlogits(Bf16* logits_to_dlogits, const float* row_stats, const int* targets, int N, int V,
                                int Vp, int first) override;
  void classifier_softmax(Bf16* logits_to_probs, int N, int V, int Vp) override;
  void classifier_slice_softmax(Bf16* logits_to_probs, const float* row_stats, int N, int V, int Vp) override;
  void classifier_backward(float* din, float* dweight, const Bf16* dlogits, const float* in, const float* weight,
                           int N, int C, int OC, float scale) override;
  void rmsnorm_forward(float* out, float* rstd, const float* in, const float* weight, int N, int C,
                       double eps) override;
  void rmsnorm_backward(float* din, float* dweight, const float* dout, const float* in, const float* weight,
                        const float* rstd, int N, int C) override;
  void residual_rmsnorm_forward(float* res, float* out, float* rstd, const float* a, const float* b,
                                const float* weight, int N, int C, double eps) override;
  void rope(float* x, const float* cosines, const float* sines, int B, int T, int first, int W, int heads, int hs,
            bool inverse) override;
  void swiglu_forward(float* out, const float* in, int N, int F) override;
  void swiglu_backward(float* din, const float* in, const float* dout, int N, int F) override;

  // Products run so far through cuBLASLt with epilogue `e` (tests ask whether a path was taken).
  std::size_t epilogue_runs(LtEpilogue e) const { return bf16_matmuls_.epilogue_runs(e); }

 private:
  CudaKernelContext ctx_;  // device, stream, cuBLAS, the shared scratch blocks
  bool bf16_;
  bool flash_;  // flash attention where the head width allows (exec/cuda/flash_attention.hpp)
  bool fused_;  // bf16 logits and the fused cross-entropy (classifier.cu)
  bool gelu_fusion_;  // GPT-2's GELU in cuBLASLt's epilogues (Bf16Matmuls::forward_gelu, backward_dgelu)
  // The linear layers' products when bf16_: operands rounded to bf16 in scratch of their own.
  // (Attention's batched products hand cuBLAS fp32 operands with CUBLAS_COMPUTE_32F_FAST_16BF.)
  Bf16Matmuls bf16_matmuls_;
};

}  // namespace st
