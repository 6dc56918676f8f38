#pragma once
// The host backend with layer kernels of the test's choosing: the host's kernels with one claim
// changed (flash attention, the fused classifier), so that a model built on it takes the path a
// device in bf16 takes there, while memory, copies and the optimizer stay the host's. It counts
// the calls that would make the host wait on a device (download, synchronize), so a test can
// hold a training step to its one read.
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
  void download(void* to, const void* from, std::size_t bytes) override {
    ++waits_;
    host_.download(to, from, bytes);
  }
  void convert(Buffer to, Buffer from) override { host_.convert(to, from); }
  void accumulate(Buffer into, const float* from) override { host_.accumulate(into, from); }
  void adamw(const AdamWStepConstants& c, const AdamWTile* tiles, std::size_t tile_count, float* params, Buffer grads,
             float* m, float* v, const float* grad_scale) override {
    host_.adamw(c, tiles, tile_count, params, grads, m, v, grad_scale);
  }
  void add_sum_squares(double* total, std::span<const Buffer> parts) override { host_.add_sum_squares(total, parts); }
  void divide(double* value, double divisor) override { host_.divide(value, divisor); }
  void set_clip_factor(StepScalars* scalars, double clip) override { host_.set_clip_factor(scalars, clip); }
  void synchronize() override { ++waits_; }
  LayerKernels<float>& layer_kernels() override { return kernels_; }

  // download() and synchronize() calls so far.
  long waits() const { return waits_; }

 private:
  long waits_ = 0;
  std::string description_;
  HostExec host_;
  Kernels kernels_;
};

}  // namespace st::testing_support
