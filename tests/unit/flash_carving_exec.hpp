#pragma once
// A host backend whose layer kernels say that attention is flash attention, as a CUDA device's
// in bf16 do: a model built on it carves its activations as on such a device (a log-sum-exp per
// row kept, no T x T blocks), and its constructor checks the carving against activation_sizes.
// For that check only: the host kernels cannot run a model so carved (they need probabilities).
#include "exec/host_exec.hpp"
#include "exec/layer_kernels.hpp"

namespace st::testing_support {

class FlashClaimingKernels final : public HostLayerKernels<float> {
 public:
  bool attention_uses_flash(int head_dim) const override { return st::attention_uses_flash(true, head_dim); }
};

class FlashCarvingExec final : public Exec {
 public:
  MemorySpace space() const override { return host_.space(); }
  std::string description() const override { return "host memory, flash attention's carving"; }
  Memory allocate(std::size_t bytes) override { return host_.allocate(bytes); }
  void zero(void* data, std::size_t bytes) override { host_.zero(data, bytes); }
  void copy(void* to, const void* from, std::size_t bytes) override { host_.copy(to, from, bytes); }
  void upload(void* to, const void* from, std::size_t bytes) override { host_.upload(to, from, bytes); }
  void download(void* to, const void* from, std::size_t bytes) override { host_.download(to, from, bytes); }
  void convert(Buffer to, Buffer from) override { host_.convert(to, from); }
  void accumulate(Buffer into, const float* from) override { host_.accumulate(into, from); }
  double sum_squares(Buffer values) override { return host_.sum_squares(values); }
  void adamw(const AdamWConstants& c, float* params, const float* grads, float* m, float* v, std::size_t n) override {
    host_.adamw(c, params, grads, m, v, n);
  }
  void synchronize() override {}
  LayerKernels<float>& layer_kernels() override { return kernels_; }

 private:
  HostExec host_;
  FlashClaimingKernels kernels_;
};

}  // namespace st::testing_support
