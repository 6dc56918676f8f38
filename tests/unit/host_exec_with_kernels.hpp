#pragma once
// The host backend with layer kernels of the test's choosing: the host's kernels with one claim
// changed (flash attention, the fused classifier), so that a model built on it takes the path a
// device in bf16 takes there, while memory, copies and the optimizer stay the host's.
#include <string>
#include <utility>

#include "exec/exec.hpp"
#include "exec/host_exec.hpp"

namespace st::testing_support {

template <class Kernels>
class HostExecWithKernels : public Exec {
 public:
  explicit HostExecWithKernels(std::string description) : description_(std::move(description)) {}
  MemorySpace space() const override { return host_.space(); }
  std::string description() const override { return description_; }
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
  std::string description_;
  HostExec host_;
  Kernels kernels_;
};

}  // namespace st::testing_support
