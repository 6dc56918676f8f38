#include "exec/host_bf16_kernels.hpp"


#include "exec/host_kernels.hpp"
#include "exec/kernel_scratch.hpp"

namespace st {

namespace {

std::size_t rows_of(int N, int C) { return static_cast<std::size_t>(N) * static_cast<std::size_t>(C); }
// The width of attention's qkv rows: q's C, then k's and v's NKV heads of C / NH.
std::size_t qkv_width(int C, int NH, int NKV) {
  return static_cast<std::size_t>(C) + 2 * static_cast<std::size_t>(NKV) * static_cast<std::size_t>(C / NH);
}
// The fp32 kernels' view of bf16 storage's attention buffers: the probabilities, statistics and
// the grouped-query gradient as they are (fp32); `out` (flash attention's) is not the host's.
AttentionProbs<float> fp32_probs(const AttentionProbs<float, Bf16>& p) {
  return {p.kept, p.working, p.dworking, p.heads, p.grouped_gradient, p.lse, p.row_dots, nullptr};
}

}  // namespace

void store_bf16(Bf16* to, const float* from, std::size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (std::size_t i = 0; i < n; ++i) to[i] = to_bf16(from[i]);
}

void widen_bf16(float* to, const Bf16* from, std::size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (std::size_t i = 0; i < n; ++i) to[i] = to_float(from[i]);
}

void HostBf16LayerKernels::reserve_scratch(const KernelWorkload& workload) {
  const HostBf16Slots sizes = host_bf16_slots(workload);
  for (std::size_t i = 0; i < slots_.size(); ++i) slot(i, static_cast<std::size_t>(sizes.elements[i]));
}

std::vector<float>& HostBf16LayerKernels::slot(std::size_t i, std::size_t n) {
  std::vector<float>& s = slots_.at(i);
  if (s.size() < n) s.resize(n);
  return s;
}

const float* HostBf16LayerKernels::widened(std::size_t i, const Bf16* from, std::size_t n) {
  if (!from) return nullptr;
  float* to = slot(i, n).data();
  widen_bf16(to, from, n);
  return to;
}

void HostBf16LayerKernels::encoder_forward(Bf16* out, const int* tokens, const Bf16* wte, const Bf16* wpe, int B,
                                           int T, int C) {
  // The table is read by token: its rows are widened where they are read, not in a copy (the
  // kernel does not know the vocabulary's size).
  const std::size_t width = static_cast<std::size_t>(C);
#pragma omp parallel for schedule(static)
  for (int row = 0; row < B * T; ++row) {
    const int token = tokens[row];
    const Bf16* e = token >= 0 ? wte + static_cast<std::size_t>(token) * width : nullptr;
    const Bf16* p = wpe ? wpe + static_cast<std::size_t>(row % T) * width : nullptr;
    Bf16* o = out + static_cast<std::size_t>(row) * width;
    for (std::size_t c = 0; c < width; ++c) {
      const float sum = (e ? to_float(e[c]) : 0.0f) + (p ? to_float(p[c]) : 0.0f);
      o[c] = to_bf16(sum);
    }
  }
}

void HostBf16LayerKernels::encoder_backward(float* dwte, float* dwpe, const Bf16* dout, const int* tokens, int B,
                                            int T, int C) {
  f32_.encoder_backward(dwte, dwpe, widened(0, dout, rows_of(B * T, C)), tokens, B, T, C);
}

void HostBf16LayerKernels::layernorm_forward(Bf16* out, float* mean, float* rstd, const Bf16* in, const Bf16* weight,
                                             const Bf16* bias, int N, int C) {
  float* o = result(0, rows_of(N, C));
  f32_.layernorm_forward(o, mean, rstd, widened(1, in, rows_of(N, C)), widened(2, weight, rows_of(1, C)),
                         widened(3, bias, rows_of(1, C)), N, C);
  store_bf16(out, o, rows_of(N, C));
}

void HostBf16LayerKernels::layernorm_backward(Bf16* din, float* dweight, float* dbias, const Bf16* dout,
                                              const Bf16* in, const Bf16* weight, const float* mean,
                                              const float* rstd, int N, int C) {
  float* d = const_cast<float*>(widened(0, din, rows_of(N, C)));  // din += ...: its stored values first
  f32_.layernorm_backward(d, dweight, dbias, widened(1, dout, rows_of(N, C)), widened(2, in, rows_of(N, C)),
                          widened(3, weight, rows_of(1, C)), mean, rstd, N, C);
  store_bf16(din, d, rows_of(N, C));
}

void HostBf16LayerKernels::linear_forward(Bf16* out, const Bf16* in, const Bf16* weight, const Bf16* bias, int N,
                                          int C, int OC) {
  float* o = result(0, rows_of(N, OC));
  f32_.linear_forward(o, widened(1, in, rows_of(N, C)), widened(2, weight, rows_of(OC, C)),
                      widened(3, bias, rows_of(1, OC)), N, C, OC);
  store_bf16(out, o, rows_of(N, OC));
}

void HostBf16LayerKernels::linear_backward(Bf16* din, float* dweight, float* dbias, const Bf16* dout, const Bf16* in,
                                           const Bf16* weight, int N, int C, int OC, bool accumulate_din) {
  float* d = accumulate_din ? const_cast<float*>(widened(0, din, rows_of(N, C))) : result(0, rows_of(N, C));
  f32_.linear_backward(d, dweight, dbias, widened(1, dout, rows_of(N, OC)), widened(2, in, rows_of(N, C)),
                       widened(3, weight, rows_of(OC, C)), N, C, OC, accumulate_din);
  store_bf16(din, d, rows_of(N, C));
}

void HostBf16LayerKernels::attention_forward(Bf16* out, const AttentionProbs<float, Bf16>& probs, const Bf16* qkv,
                                             int B, int T, int C, int NH, int NKV) {
  float* o = result(0, rows_of(B * T, C));
  f32_.attention_forward(o, fp32_probs(probs), widened(1, qkv, rows_of(B * T, 1) * qkv_width(C, NH, NKV)), B, T, C,
                         NH, NKV);
  store_bf16(out, o, rows_of(B * T, C));
}

void HostBf16LayerKernels::attention_backward(Bf16* dqkv, const AttentionProbs<float, Bf16>& probs, const Bf16* dout,
                                              const Bf16* qkv, int B, int T, int C, int NH, int NKV) {
  const std::size_t rows = rows_of(B, T), width = qkv_width(C, NH, NKV);
  float* d = result(0, rows * width);
  f32_.attention_backward(d, fp32_probs(probs), widened(1, dout, rows * static_cast<std::size_t>(C)), widened(2, qkv, rows * width),
                          B, T, C, NH, NKV);
  store_bf16(dqkv, d, rows * width);
}

void HostBf16LayerKernels::attention_rows(Bf16* out, const Bf16* qkv, int first, int n, int C, int NH, int NKV) {
  float* o = result(0, rows_of(n, C));
  f32_.attention_rows(o, widened(1, qkv, rows_of(first + n, 1) * qkv_width(C, NH, NKV)), first, n, C, NH, NKV);
  store_bf16(out, o, rows_of(n, C));
}

void HostBf16LayerKernels::gelu_forward(Bf16* out, const Bf16* in, std::size_t n) {
  float* o = result(0, n);
  f32_.gelu_forward(o, widened(1, in, n), n);
  store_bf16(out, o, n);
}

void HostBf16LayerKernels::gelu_backward(Bf16* din, const Bf16* in, const Bf16* dout, std::size_t n) {
  float* d = result(0, n);
  f32_.gelu_backward(d, widened(1, in, n), widened(2, dout, n), n);
  store_bf16(din, d, n);
}

void HostBf16LayerKernels::add(Bf16* out, const Bf16* a, const Bf16* b, std::size_t n) {
  float* o = result(0, n);
  f32_.add(o, widened(1, a, n), widened(2, b, n), n);
  store_bf16(out, o, n);
}

void HostBf16LayerKernels::softmax_cross_entropy_forward(Bf16* logits_to_probs, float* losses, const int* targets,
                                                         int N, int V, int Vp, LossSum loss) {
  float* x = const_cast<float*>(widened(0, logits_to_probs, rows_of(N, Vp)));
  f32_.softmax_cross_entropy_forward(x, losses, targets, N, V, Vp, loss);
  store_bf16(logits_to_probs, x, rows_of(N, Vp));
}

void HostBf16LayerKernels::softmax_cross_entropy_backward(Bf16* probs_to_dlogits, const int* targets, int N, int V,
                                                          int Vp, float scale) {
  float* x = const_cast<float*>(widened(0, probs_to_dlogits, rows_of(N, Vp)));
  f32_.softmax_cross_entropy_backward(x, targets, N, V, Vp, scale);
  store_bf16(probs_to_dlogits, x, rows_of(N, Vp));
}

void HostBf16LayerKernels::logit_slice_stats(const Bf16* logits, const int* targets, float* stats, int N, int V,
                                             int Vp, int first) {
  f32_.logit_slice_stats(widened(0, logits, rows_of(N, Vp)), targets, stats, N, V, Vp, first);
}

void HostBf16LayerKernels::logit_slices_combine(const float* gathered, float* row_stats, float* losses,
                                                const int* targets, int N, int parts, LossSum loss) {
  f32_.logit_slices_combine(gathered, row_stats, losses, targets, N, parts, loss);
}

void HostBf16LayerKernels::logit_slice_softmax(Bf16* logits_to_probs, const float* row_stats, int N, int V, int Vp) {
  float* x = const_cast<float*>(widened(0, logits_to_probs, rows_of(N, Vp)));
  f32_.logit_slice_softmax(x, row_stats, N, V, Vp);
  store_bf16(logits_to_probs, x, rows_of(N, Vp));
}

void HostBf16LayerKernels::logit_slice_backward(Bf16* probs_to_dlogits, const int* targets, int N, int V, int Vp,
                                                int first, float scale) {
  float* x = const_cast<float*>(widened(0, probs_to_dlogits, rows_of(N, Vp)));
  f32_.logit_slice_backward(x, targets, N, V, Vp, first, scale);
  store_bf16(probs_to_dlogits, x, rows_of(N, Vp));
}

void HostBf16LayerKernels::classifier_logits(Bf16* logits, const Bf16* in, const Bf16* weight, int N, int C, int OC) {
  f32_.classifier_logits(logits, widened(0, in, rows_of(N, C)), widened(1, weight, rows_of(OC, C)), N, C, OC);
}

void HostBf16LayerKernels::classifier_cross_entropy(Bf16* logits_to_dlogits, float* losses, const int* targets, int N,
                                                    int V, int Vp, LossSum loss) {
  f32_.classifier_cross_entropy(logits_to_dlogits, losses, targets, N, V, Vp, loss);
}

void HostBf16LayerKernels::classifier_slice_stats(const Bf16* logits, const int* targets, float* stats, int N, int V,
                                                  int Vp, int first) {
  f32_.classifier_slice_stats(logits, targets, stats, N, V, Vp, first);
}

void HostBf16LayerKernels::classifier_slice_dlogits(Bf16* logits_to_dlogits, const float* row_stats,
                                                    const int* targets, int N, int V, int Vp, int first) {
  f32_.classifier_slice_dlogits(logits_to_dlogits, row_stats, targets, N, V, Vp, first);
}

void HostBf16LayerKernels::classifier_softmax(Bf16* logits_to_probs, int N, int V, int Vp) {
  f32_.classifier_softmax(logits_to_probs, N, V, Vp);
}

void HostBf16LayerKernels::classifier_slice_softmax(Bf16* logits_to_probs, const float* row_stats, int N, int V,
                                                    int Vp) {
  f32_.classifier_slice_softmax(logits_to_probs, row_stats, N, V, Vp);
}

void HostBf16LayerKernels::classifier_backward(Bf16* din, float* dweight, const Bf16* dlogits, const Bf16* in,
                                               const Bf16* weight, int N, int C, int OC, float scale) {
  float* d = result(0, rows_of(N, C));
  // The head's weight in slot 1, where classifier_logits widens it too: one slot holds it.
  f32_.classifier_backward(d, dweight, dlogits, widened(2, in, rows_of(N, C)), widened(1, weight, rows_of(OC, C)), N,
                           C, OC, scale);
  store_bf16(din, d, rows_of(N, C));
}

void HostBf16LayerKernels::rmsnorm_forward(Bf16* out, float* rstd, const Bf16* in, const Bf16* weight, int N, int C,
                                           double eps) {
  float* o = result(0, rows_of(N, C));
  f32_.rmsnorm_forward(o, rstd, widened(1, in, rows_of(N, C)), widened(2, weight, rows_of(1, C)), N, C, eps);
  store_bf16(out, o, rows_of(N, C));
}

void HostBf16LayerKernels::rmsnorm_backward(Bf16* din, float* dweight, const Bf16* dout, const Bf16* in,
                                            const Bf16* weight, const float* rstd, int N, int C) {
  float* d = const_cast<float*>(widened(0, din, rows_of(N, C)));  // din += ...
  f32_.rmsnorm_backward(d, dweight, widened(1, dout, rows_of(N, C)), widened(2, in, rows_of(N, C)),
                        widened(3, weight, rows_of(1, C)), rstd, N, C);
  store_bf16(din, d, rows_of(N, C));
}

void HostBf16LayerKernels::rope(Bf16* x, const float* cosines, const float* sines, int B, int T, int first, int W,
                                int heads, int hs, bool inverse) {
  const std::size_t n = rows_of(B * T, W);
  float* r = const_cast<float*>(widened(0, x, n));
  f32_.rope(r, cosines, sines, B, T, first, W, heads, hs, inverse);
  store_bf16(x, r, n);
}

void HostBf16LayerKernels::swiglu_forward(Bf16* out, const Bf16* in, int N, int F) {
  float* o = result(0, rows_of(N, F));
  f32_.swiglu_forward(o, widened(1, in, rows_of(N, 2 * F)), N, F);
  store_bf16(out, o, rows_of(N, F));
}

void HostBf16LayerKernels::swiglu_backward(Bf16* din, const Bf16* in, const Bf16* dout, int N, int F) {
  float* d = result(0, rows_of(N, 2 * F));
  f32_.swiglu_backward(d, widened(1, in, rows_of(N, 2 * F)), widened(2, dout, rows_of(N, F)), N, F);
  store_bf16(din, d, rows_of(N, 2 * F));
}

}  // namespace st
