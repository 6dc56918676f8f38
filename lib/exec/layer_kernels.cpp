#include "exec/layer_kernels.hpp"

#include <omp.h>

#include "core/error.hpp"
#include "exec/classifier_reference.hpp"
#include "exec/host_kernels.hpp"
#include "exec/host_llama_kernels.hpp"

namespace st {

template <class R>
void HostLayerKernels<R>::encoder_forward(R* out, const int* tokens, const R* wte, const R* wpe, int B, int T, int C) {
  kernels::encoder_forward(out, tokens, wte, wpe, B, T, C);
}
template <class R>
void HostLayerKernels<R>::encoder_backward(R* dwte, R* dwpe, const R* dout, const int* tokens, int B, int T, int C) {
  kernels::encoder_backward(dwte, dwpe, dout, tokens, B, T, C);
}
template <class R>
void HostLayerKernels<R>::layernorm_forward(R* out, R* mean, R* rstd, const R* in, const R* weight, const R* bias,
                                            int N, int C) {
  kernels::layernorm_forward(out, mean, rstd, in, weight, bias, N, C);
}
template <class R>
void HostLayerKernels<R>::layernorm_backward(R* din, R* dweight, R* dbias, const R* dout, const R* in, const R* weight,
                                             const R* mean, const R* rstd, int N, int C) {
  kernels::layernorm_backward(din, dweight, dbias, dout, in, weight, mean, rstd, N, C);
}
template <class R>
void HostLayerKernels<R>::linear_forward(R* out, const R* in, const R* weight, const R* bias, int N, int C, int OC) {
  kernels::linear_forward(out, in, weight, bias, N, C, OC);
}
template <class R>
void HostLayerKernels<R>::linear_backward(R* din, R* dweight, R* dbias, const R* dout, const R* in, const R* weight,
                                          int N, int C, int OC, bool accumulate_din) {
  kernels::linear_backward(din, dweight, dbias, dout, in, weight, N, C, OC, accumulate_din);
}
template <class R>
int HostLayerKernels<R>::attention_heads_at_once(int B, int NH) const {
  return st::attention_heads_at_once(false, B, NH, omp_get_max_threads());
}
template <class R>
void HostLayerKernels<R>::attention_forward(R* out, const AttentionProbs<R>& probs, const R* qkv, int B, int T, int C,
                                            int NH, int NKV) {
  kernels::attention_forward(out, probs, qkv, B, T, C, NH, NKV);
}
template <class R>
void HostLayerKernels<R>::attention_backward(R* dqkv, const AttentionProbs<R>& probs, const R* dout, const R* qkv, int B,
                                             int T, int C, int NH, int NKV) {
  if (NKV == NH) return kernels::attention_backward(dqkv, probs, dout, qkv, B, T, C, NH, NKV);
  ST_REQUIRE(probs.grouped_gradient, "grouped-query attention backward on the host needs AttentionProbs::grouped_gradient");
  kernels::attention_backward(probs.grouped_gradient, probs, dout, qkv, B, T, C, NH, NKV);
  kernels::gqa_fold(dqkv, probs.grouped_gradient, B * T, C, NH, NKV);
}
template <class R>
void HostLayerKernels<R>::attention_rows(R* out, const R* qkv, int first, int n, int C, int NH, int NKV) {
  kernels::attention_rows(out, qkv, first, n, C, NH, NKV);
}
template <class R>
void HostLayerKernels<R>::gelu_forward(R* out, const R* in, std::size_t n) {
  kernels::gelu_forward(out, in, n);
}
template <class R>
void HostLayerKernels<R>::gelu_backward(R* din, const R* in, const R* dout, std::size_t n) {
  kernels::gelu_backward(din, in, dout, n);
}
template <class R>
void HostLayerKernels<R>::add(R* out, const R* a, const R* b, std::size_t n) {
  kernels::add(out, a, b, n);
}
namespace {
void add_loss(LossSum loss, double sum) {
  if (loss.total) *loss.total += sum / loss.divisor;
}
}  // namespace

template <class R>
void HostLayerKernels<R>::softmax_cross_entropy_forward(R* logits_to_probs, R* losses, const int* targets, int N, int V,
                                                        int Vp, LossSum loss) {
  add_loss(loss, kernels::softmax_cross_entropy_forward(logits_to_probs, losses, targets, N, V, Vp));
}
template <class R>
void HostLayerKernels<R>::softmax_cross_entropy_backward(R* probs_to_dlogits, const int* targets, int N, int V, int Vp,
                                                         R scale) {
  kernels::softmax_cross_entropy_backward(probs_to_dlogits, targets, N, V, Vp, scale);
}

template <class R>
void HostLayerKernels<R>::logit_slice_stats(const R* logits, const int* targets, R* stats, int N, int V, int Vp,
                                            int first) {
  kernels::logit_slice_stats(logits, targets, stats, N, V, Vp, first);
}
template <class R>
void HostLayerKernels<R>::logit_slices_combine(const R* gathered, R* row_stats, R* losses, const int* targets, int N,
                                               int parts, LossSum loss) {
  add_loss(loss, kernels::logit_slices_combine(gathered, row_stats, losses, targets, N, parts));
}
template <class R>
void HostLayerKernels<R>::logit_slice_softmax(R* logits_to_probs, const R* row_stats, int N, int V, int Vp) {
  kernels::logit_slice_softmax(logits_to_probs, row_stats, N, V, Vp);
}
template <class R>
void HostLayerKernels<R>::logit_slice_backward(R* probs_to_dlogits, const int* targets, int N, int V, int Vp, int first,
                                               R scale) {
  kernels::logit_slice_backward(probs_to_dlogits, targets, N, V, Vp, first, scale);
}

template <class R>
void HostLayerKernels<R>::classifier_logits(Bf16* logits, const R* in, const R* weight, int N, int C, int OC) {
  kernels::classifier_logits(logits, in, weight, N, C, OC);
}
template <class R>
void HostLayerKernels<R>::classifier_cross_entropy(Bf16* logits_to_dlogits, R* losses, const int* targets, int N,
                                                   int V, int Vp, LossSum loss) {
  add_loss(loss, kernels::classifier_cross_entropy(logits_to_dlogits, losses, targets, N, V, Vp));
}
template <class R>
void HostLayerKernels<R>::classifier_slice_stats(const Bf16* logits, const int* targets, R* stats, int N, int V, int Vp,
                                                 int first) {
  kernels::classifier_slice_stats(logits, targets, stats, N, V, Vp, first);
}
template <class R>
void HostLayerKernels<R>::classifier_slice_dlogits(Bf16* logits_to_dlogits, const R* row_stats, const int* targets,
                                                   int N, int V, int Vp, int first) {
  kernels::classifier_slice_dlogits(logits_to_dlogits, row_stats, targets, N, V, Vp, first);
}
template <class R>
void HostLayerKernels<R>::classifier_softmax(Bf16* logits_to_probs, int N, int V, int Vp) {
  kernels::classifier_softmax<R>(logits_to_probs, N, V, Vp);
}
template <class R>
void HostLayerKernels<R>::classifier_slice_softmax(Bf16* logits_to_probs, const R* row_stats, int N, int V, int Vp) {
  kernels::classifier_slice_softmax(logits_to_probs, row_stats, N, V, Vp);
}
template <class R>
void HostLayerKernels<R>::classifier_backward(R* din, R* dweight, const Bf16* dlogits, const R* in, const R* weight,
                                              int N, int C, int OC, R scale) {
  kernels::classifier_backward(din, dweight, dlogits, in, weight, N, C, OC, scale);
}

template <class R>
void HostLayerKernels<R>::rmsnorm_forward(R* out, R* rstd, const R* in, const R* weight, int N, int C, double eps) {
  kernels::rmsnorm_forward(out, rstd, in, weight, N, C, eps);
}
template <class R>
void HostLayerKernels<R>::rmsnorm_backward(R* din, R* dweight, const R* dout, const R* in, const R* weight,
                                           const R* rstd, int N, int C) {
  kernels::rmsnorm_backward(din, dweight, dout, in, weight, rstd, N, C);
}
template <class R>
void HostLayerKernels<R>::rope(R* x, const R* cosines, const R* sines, int B, int T, int first, int W, int heads, int hs,
                               bool inverse) {
  kernels::rope(x, cosines, sines, B, T, first, W, heads, hs, inverse);
}
template <class R>
void HostLayerKernels<R>::swiglu_forward(R* out, const R* in, int N, int F) {
  kernels::swiglu_forward(out, in, N, F);
}
template <class R>
void HostLayerKernels<R>::swiglu_backward(R* din, const R* in, const R* dout, int N, int F) {
  kernels::swiglu_backward(din, in, dout, N, F);
}

template class HostLayerKernels<float>;
template class HostLayerKernels<double>;

}  // namespace st
