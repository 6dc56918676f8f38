#pragma once
// A host backend whose layer kernels fuse the classifier, as a CUDA device's in bf16 do: a model
// built on it stores its logits in bf16 and trains through the fused cross-entropy
// (LayerKernels::classifier_*), computed by the host reference (exec/classifier_reference.hpp).
// Everything else is the host's. So the models' fused path (the carving of bf16 logits, the loss
// and d(loss)/d(logits) in one pass, the scale in the head's backward, the vocabulary-parallel
// slices, decoding and probs() from bf16 logits) runs and is tested on the CPU.
#include "exec/host_exec.hpp"
#include "exec/layer_kernels.hpp"

namespace st::testing_support {

class FusedClassifierKernels final : public HostLayerKernels<float> {
 public:
  bool fused_classifier() const override { return true; }
};

class FusedClassifierExec final : public Exec {
 public:
  MemorySpace space() const override { return host_.space(); }
  std::string description() const override { return "host, the fused classifier's reference"; }
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
  FusedClassifierKernels kernels_;
};

}  // namespace st::testing_support
