#pragma once
// The layer kernels with bf16 storage on the host: parameters, activations and activations'
// gradients in bf16, parameters' gradients and per-row statistics in fp32
// (LayerKernels<float, Bf16>). The GPU's kernels in bf16 are tested against these.
//
// Each kernel computes as a device kernel with bf16 storage does: it reads its bf16 operands
// (widened exactly), computes in fp32, and rounds what it stores to bf16 once, to nearest even.
// A kernel that adds into a bf16 gradient (layernorm_backward's din, linear_backward with
// accumulate_din) reads it, adds in fp32 and rounds the sum once. Parameters' gradients are fp32
// and accumulate in fp32 across micro-batches, as the device's. The fp32 arithmetic in between
// is the host's fp32 kernels' (exec/host_kernels.hpp), so the only difference from an fp32 run
// on the same bf16 inputs is where the results are stored. The seam's compositions
// (residual_layernorm_forward, linear_gelu_forward, linear_backward_gelu) store their
// intermediate (the sum, the product, the input's gradient) as their two kernels do: a device that
// fuses them may round the intermediate differently (cuBLASLt's GELU epilogues do).
//
// Like the device in bf16 it fuses the classifier (bf16 logits, exec/classifier_reference.hpp).
// Its attention is the host's exact attention on the widened q, k and v, the probabilities in
// fp32; the device's flash attention rounds them to bf16 inside its products, which its own
// reference (exec/flash_reference.hpp) covers.
//
// It is a reference: each call widens its operands into four fp32 slots it keeps (sized for the
// largest model by reserve_scratch, counted by `check` as the kernels' scratch), so it is several
// times slower than the fp32 kernels and holds about four fp32 activations' or weights' worth
// more. Not for concurrent calls (the host backend's one instance serves its models in turn, as
// a device's kernels do).
#include <array>
#include <vector>

#include "exec/layer_kernels.hpp"

namespace st {

class HostBf16LayerKernels final : public LayerKernels<float, Bf16> {
 public:
  // The widening slots at their largest for the workload (exec/kernel_scratch.hpp
  // host_bf16_slots), so that nothing grows inside a step; `check` counts them.
  void reserve_scratch(const KernelWorkload& workload) override;
  // The slots' elements now, slot by slot (tests: nothing grows past the reservation in a step).
  std::array<std::size_t, 4> slot_elements() const {
    return {slots_[0].size(), slots_[1].size(), slots_[2].size(), slots_[3].size()};
  }
  // What the slots hold now, in bytes (the memory line's "kernels' scratch" on a CPU rank).
  std::uint64_t held_bytes() const {
    std::uint64_t elements = 0;
    for (const std::vector<float>& s : slots_) elements += s.size();
    return elements * sizeof(float);
  }
  void encoder_forward(Bf16* out, const int* tokens, const Bf16* wte, const Bf16* wpe, int B, int T, int C) override;
  void encoder_backward(float* dwte, float* dwpe, const Bf16* dout, const int* tokens, int B, int T, int C) override;
  void layernorm_forward(Bf16* out, float* mean, float* rstd, const Bf16* in, const Bf16* weight, const Bf16* bias,
                         int N, int C) override;
  void layernorm_backward(Bf16* din, float* dweight, float* dbias, const Bf16* dout, const Bf16* in,
                          const Bf16* weight, const float* mean, const float* rstd, int N, int C) override;
  void linear_forward(Bf16* out, const Bf16* in, const Bf16* weight, const Bf16* bias, int N, int C, int OC) override;
  void linear_backward(Bf16* din, float* dweight, float* dbias, const Bf16* dout, const Bf16* in, const Bf16* weight,
                       int N, int C, int OC, bool accumulate_din) override;
  int attention_heads_at_once(int B, int NH) const override { return f32_.attention_heads_at_once(B, NH); }
  bool attention_uses_flash(int) const override { return false; }
  void attention_forward(Bf16* out, const AttentionProbs<float, Bf16>& probs, const Bf16* qkv, int B, int T, int C,
                         int NH, int NKV) override;
  // Grouped-query attention folds through probs.grouped_gradient (fp32), as the host's does.
  void attention_backward(Bf16* dqkv, const AttentionProbs<float, Bf16>& probs, const Bf16* dout, const Bf16* qkv,
                          int B, int T, int C, int NH, int NKV) override;
  void attention_rows(Bf16* out, const Bf16* qkv, int first, int n, int C, int NH, int NKV) override;
  void gelu_forward(Bf16* out, const Bf16* in, std::size_t n) override;
  void gelu_backward(Bf16* din, const Bf16* in, const Bf16* dout, std::size_t n) override;
  void add(Bf16* out, const Bf16* a, const Bf16* b, std::size_t n) override;
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
  // The unfused cross-entropy above (softmax_cross_entropy_*, logit_slice_*) works on bf16 logits
  // too, but the models never call it (bf16 storage fuses the classifier): its rows x vocabulary
  // of widened logits are not in reserve_scratch's slots.
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
  void rmsnorm_backward(Bf16* din, float* dweight, const Bf16* dout, const Bf16* in, const Bf16* weight,
                        const float* rstd, int N, int C) override;
  void rope(Bf16* x, const float* cosines, const float* sines, int B, int T, int first, int W, int heads, int hs,
            bool inverse) override;
  void swiglu_forward(Bf16* out, const Bf16* in, int N, int F) override;
  void swiglu_backward(Bf16* din, const Bf16* in, const Bf16* dout, int N, int F) override;

 private:
  // fp32 copies of a call's operands and results, one per argument position, kept between calls.
  std::vector<float>& slot(std::size_t i, std::size_t n);
  // The bf16 values widened into slot i (null for null: an absent bias or position table).
  const float* widened(std::size_t i, const Bf16* from, std::size_t n);
  // Slot i sized for n fp32 results (their values unspecified until a kernel writes them).
  float* result(std::size_t i, std::size_t n) { return slot(i, n).data(); }

  HostLayerKernels<float> f32_;
  std::array<std::vector<float>, 4> slots_;
};

// Each of `n` values rounded to bf16 (to nearest even) into `to`, and the reverse, widened
// exactly: the host's conversions (HostExec::convert and these kernels').
void store_bf16(Bf16* to, const float* from, std::size_t n);
void widen_bf16(float* to, const Bf16* from, std::size_t n);

}  // namespace st
