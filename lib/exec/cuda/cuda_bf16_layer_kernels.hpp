#pragma once
// The layer kernels with bf16 storage on one CUDA device (LayerKernels<float, Bf16>, llm.c's
// layout): parameters, activations and their gradients in bf16, parameters' gradients and
// per-row statistics in fp32. They are CudaLayerKernels' kernels instantiated for bf16 storage
// (storage.cuh): each reads its bf16 operands, computes in fp32 and rounds what it stores once,
// to nearest even, at the points the host's reference rounds (exec/host_bf16_kernels.hpp), which
// the GPU tests hold them to.
//
// - Linear layers: cuBLAS with bf16 operands as they are in memory (no rounding pass, no
//   operand scratch) and fp32 accumulation; activations written in bf16, rounded once by the
//   product's own write; weight gradients accumulated in fp32 (beta = 1). A bias is added in fp32
//   by cuBLASLt's epilogue before the one rounding; where cuBLASLt has no algorithm for the
//   shapes it is broadcast into the output and the product adds to it (beta = 1): the bias is
//   bf16 already, so the sum is still rounded once. A gradient added into a bf16 buffer
//   (accumulate_din) is read, added in fp32 and rounded once the same way.
// - Attention is flash attention (flash_attention.hpp) reading bf16 q, k and v: only head widths
//   it has kernels for (attention_uses_flash); the trainer refuses others before allocating.
// - The classifier is the fused one (classifier.cu): bf16 logits from bf16 operands.
// - GELU, SwiGLU, RoPE, the norms and the residual adds are the fp32 kernels' templates. With
//   gelu_fusion, GPT-2's GELU rides cuBLASLt's epilogues as in CudaLayerKernels (GELU_AUX_BIAS
//   writes the output and keeps the argument, DGELU the argument's gradient), each with a bf16
//   output rounded once: the seam's composition rounds the argument (and the input's gradient)
//   before the GELU, so the two differ by such roundings and by cuBLASLt's tanh (within 1e-4).
//
// Deterministic as CudaLayerKernels: no floating-point atomics, every reduction in a fixed order.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "exec/cuda/cuda_kernel_context.hpp"
#include "exec/cuda/lt_matmul.hpp"
#include "exec/layer_kernels.hpp"

namespace st {

class CudaBf16LayerKernels final : public LayerKernels<float, Bf16> {
 public:
  // `gelu_fusion`: GPT-2's GELU in cuBLASLt's epilogues where it has an algorithm.
  CudaBf16LayerKernels(int device, cudaStream_t stream, cublasHandle_t cublas, bool gelu_fusion = false)
      : ctx_(device, stream, cublas), lt_(stream), gelu_fusion_(gelu_fusion) {}

  // The shared blocks at kernel_scratch's size for bf16 storage (no operand scratch; cuBLASLt's
  // workspace where a product has a bias).
  void reserve_scratch(const KernelWorkload& workload) override;
  const KernelScratch& reserved_scratch() const { return ctx_.reserved; }
  void encoder_forward(Bf16* out, const int* tokens, const Bf16* wte, const Bf16* wpe, int B, int T, int C) override;
  void encoder_backward(float* dwte, float* dwpe, const Bf16* dout, const int* tokens, int B, int T, int C) override;
  void layernorm_forward(Bf16* out, float* mean, float* rstd, const Bf16* in, const Bf16* weight, const Bf16* bias,
                         int N, int C) override;
  void residual_layernorm_forward(Bf16* res, Bf16* out, float* mean, float* rstd, const Bf16* a, const Bf16* b,
                                  const Bf16* weight, const Bf16* bias, int N, int C) override;
  void layernorm_backward(Bf16* din, float* dweight, float* dbias, const Bf16* dout, const Bf16* in,
                          const Bf16* weight, const float* mean, const float* rstd, int N, int C) override;
  void linear_forward(Bf16* out, const Bf16* in, const Bf16* weight, const Bf16* bias, int N, int C, int OC) override;
  void linear_backward(Bf16* din, float* dweight, float* dbias, const Bf16* dout, const Bf16* in, const Bf16* weight,
                       int N, int C, int OC, bool accumulate_din) override;
  void linear_gelu_forward(Bf16* out, Bf16* pre, const Bf16* in, const Bf16* weight, const Bf16* bias, int N, int C,
                           int OC) override;
  void linear_backward_gelu(Bf16* dpre, Bf16* scratch, float* dweight, float* dbias, const Bf16* dout, const Bf16* in,
                            const Bf16* pre, const Bf16* weight, int N, int C, int OC) override;
  int attention_heads_at_once(int B, int NH) const override;
  bool attention_uses_flash(int head_dim) const override { return st::attention_uses_flash(true, head_dim); }
  void attention_forward(Bf16* out, const AttentionProbs<float, Bf16>& probs, const Bf16* qkv, int B, int T, int C,
                         int NH, int NKV) override;
  void attention_backward(Bf16* dqkv, const AttentionProbs<float, Bf16>& probs, const Bf16* dout, const Bf16* qkv,
                          int B, int T, int C, int NH, int NKV) override;
  void attention_rows(Bf16* out, const Bf16* qkv, int first, int n, int C, int NH, int NKV) override;
  void gelu_forward(Bf16* out, const Bf16* in, std::size_t n) override;
  void gelu_backward(Bf16* din, const Bf16* in, const Bf16* dout, std::size_t n) override;
  void add(Bf16* out, const Bf16* a, const Bf16* b, std::size_t n) override;
  // The unfused cross-entropy on bf16 logits: the same kernels as fp32's, instantiated for bf16
  // (the models fuse the classifier with bf16 storage and do not call these).
  void softmax_cross_entropy_forward(Bf16* logits_to_probs, float* losses, const int* targets, int N, int V, int Vp,
                                     LossSum loss) override;
  void softmax_cross_entropy_backward(Bf16* probs_to_dlogits, const int* targets, int N, int V, int Vp,
                                      float scale) override;
  void logit_slice_stats(const Bf16* logits, const int* targets, float* stats, int N, int V, int Vp,
                         int first) override;
  void logit_slices_combine(const float* gathered, float* row_stats, float* losses, const int* targets, int N,
                            int parts, LossSum loss) override;
  void logit_slice_softmax(Bf16* logits_to_probs, const float* row_stats, int N, int V, int Vp) override;
  void logit_slice_backward(Bf16* probs_to_dlogits, const int* targets, int N, int V, int Vp, int first,
                            float scale) override;
  bool fused_classifier() const override { return true; }
  void classifier_logits(Bf16* logits, const Bf16* in, const Bf16* weight, int N, int C, int OC) override;
  void classifier_cross_entropy(Bf16* logits_to_dlogits, float* losses, const int* targets, int N, int V, int Vp,
                                LossSum loss) override;
  void classifier_slice_stats(const Bf16* logits, const int* targets, float* stats, int N, int V, int Vp,
                              int first) override;
  void classifier_slice_dlogits(Bf16* logits_to_dlogits, const float* row_stats, const int* targets, int N, int V,
                                int Vp, int first) override;
  void classifier_softmax(Bf16* logits_to_probs, int N, int V, int Vp) override;
  void classifier_slice_softmax(Bf16* logits_to_probs, const float* row_stats, int N, int V, int Vp) override;
  void classifier_backward(Bf16* din, float* dweight, const Bf16* dlogits, const Bf16* in, const Bf16* weight, int N,
                           int C, int OC, float scale) override;
  void rmsnorm_forward(Bf16* out, float* rstd, const Bf16* in, const Bf16* weight, int N, int C, double eps) override;
  void residual_rmsnorm_forward(Bf16* res, Bf16* out, float* rstd, const Bf16* a, const Bf16* b, const Bf16* weight,
                                int N, int C, double eps) override;
  void rmsnorm_backward(Bf16* din, float* dweight, const Bf16* dout, const Bf16* in, const Bf16* weight,
                        const float* rstd, int N, int C) override;
  void rope(Bf16* x, const float* cosines, const float* sines, int B, int T, int first, int W, int heads, int hs,
            bool inverse) override;
  void swiglu_forward(Bf16* out, const Bf16* in, int N, int F) override;
  void swiglu_backward(Bf16* din, const Bf16* in, const Bf16* dout, int N, int F) override;

  // Products run so far through cuBLASLt with epilogue `e` (tests ask whether a path was taken).
  std::size_t epilogue_runs(LtEpilogue e) const { return lt_.runs(e); }

 private:
  CudaKernelContext ctx_;
  LtMatmul lt_;  // the biased products, and GELU's where fused
  bool gelu_fusion_;
};

}  // namespace st
