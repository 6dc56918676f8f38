#pragma once
// The GPT-2 layer kernels behind one seam: the model (model/gpt2.hpp) is written once against
// this interface, and each execution backend implements it: the host with OpenMP and BLAS
// (exec/host_kernels.hpp, the reference), CUDA with kernels of its own and cuBLAS
// (exec/cuda/cuda_layer_kernels.cu). Pointers are in the backend's memory space; calls on a
// device are ordered on its compute stream and return before the work is done, except where a
// result comes back to the host (softmax_cross_entropy_forward's loss sum).
//
// Shapes use N = rows (batch x time), C = channels. Backward kernels accumulate (+=) into
// parameter gradients, so micro-batches add up without extra buffers. The meaning of every
// argument is that of the host kernel of the same name in exec/host_kernels.hpp.
#include <cstddef>

#include "exec/attention_probs.hpp"

namespace st {

template <class R>
class LayerKernels {
 public:
  virtual ~LayerKernels() = default;

  virtual void encoder_forward(R* out, const int* tokens, const R* wte, const R* wpe, int B, int T, int C) = 0;
  virtual void encoder_backward(R* dwte, R* dwpe, const R* dout, const int* tokens, int B, int T, int C) = 0;
  virtual void layernorm_forward(R* out, R* mean, R* rstd, const R* in, const R* weight, const R* bias, int N,
                                 int C) = 0;
  virtual void layernorm_backward(R* din, R* dweight, R* dbias, const R* dout, const R* in, const R* weight,
                                  const R* mean, const R* rstd, int N, int C) = 0;
  virtual void linear_forward(R* out, const R* in, const R* weight, const R* bias, int N, int C, int OC) = 0;
  virtual void linear_backward(R* din, R* dweight, R* dbias, const R* dout, const R* in, const R* weight, int N, int C,
                               int OC, bool accumulate_din) = 0;
  // Heads in flight at once (blocks in AttentionProbs::working and dworking) for B sequences.
  virtual int attention_heads_at_once(int B, int NH) const = 0;
  virtual void attention_forward(R* out, const AttentionProbs<R>& probs, const R* qkv, int B, int T, int C,
                                 int NH) = 0;
  virtual void attention_backward(R* dqkv, const AttentionProbs<R>& probs, const R* dout, const R* qkv, int B, int T,
                                  int C, int NH) = 0;
  // Incremental decoding: the attention of query positions first..first+n-1 of one sequence over
  // keys 0..their own position, from qkv rows [0, first + n) (a key/value cache filled row by
  // row); out is n x C. Keeps nothing for backward.
  virtual void attention_rows(R* out, const R* qkv, int first, int n, int C, int NH) = 0;
  virtual void gelu_forward(R* out, const R* in, std::size_t n) = 0;
  virtual void gelu_backward(R* din, const R* in, const R* dout, std::size_t n) = 0;
  virtual void add(R* out, const R* a, const R* b, std::size_t n) = 0;
  // The loss sum comes back to the host (a device waits for it).
  virtual double softmax_cross_entropy_forward(R* logits_to_probs, R* losses, const int* targets, int N, int V,
                                               int Vp) = 0;
  virtual void softmax_cross_entropy_backward(R* probs_to_dlogits, const int* targets, int N, int V, int Vp,
                                              R scale) = 0;
};

// The host implementation: the OpenMP/BLAS kernels of exec/host_kernels.hpp.
template <class R>
class HostLayerKernels final : public LayerKernels<R> {
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
  void attention_forward(R* out, const AttentionProbs<R>& probs, const R* qkv, int B, int T, int C, int NH) override;
  void attention_backward(R* dqkv, const AttentionProbs<R>& probs, const R* dout, const R* qkv, int B, int T, int C,
                          int NH) override;
  void attention_rows(R* out, const R* qkv, int first, int n, int C, int NH) override;
  void gelu_forward(R* out, const R* in, std::size_t n) override;
  void gelu_backward(R* din, const R* in, const R* dout, std::size_t n) override;
  void add(R* out, const R* a, const R* b, std::size_t n) override;
  double softmax_cross_entropy_forward(R* logits_to_probs, R* losses, const int* targets, int N, int V,
                                       int Vp) override;
  void softmax_cross_entropy_backward(R* probs_to_dlogits, const int* targets, int N, int V, int Vp,
                                      R scale) override;
};

extern template class HostLayerKernels<float>;
extern template class HostLayerKernels<double>;

}  // namespace st
