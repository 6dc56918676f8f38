#pragma once
// The host backend: buffers in process memory, element-wise loops with OpenMP, the model's
// kernels with OpenMP and OpenBLAS. Calls complete before they return.
#include "exec/exec.hpp"
#include "exec/host_bf16_kernels.hpp"

namespace st {

class HostExec final : public Exec {
 public:
  MemorySpace space() const override { return MemorySpace::host; }
  std::string description() const override;
  Memory allocate(std::size_t bytes) override { return Memory::private_memory(bytes); }
  void zero(void* data, std::size_t bytes) override;
  void copy(void* to, const void* from, std::size_t bytes) override;
  void upload(void* to, const void* host_from, std::size_t bytes) override { copy(to, host_from, bytes); }
  void download(void* host_to, const void* from, std::size_t bytes) override { copy(host_to, from, bytes); }
  void convert(Buffer to, Buffer from) override;
  void accumulate(Buffer into, const float* from) override;
  void adamw(const AdamWStepConstants& c, const AdamWTile* tiles, std::size_t tile_count, float* params, Buffer grads,
             float* m, float* v, const float* grad_scale) override;
  void add_sum_squares(double* total, std::span<const Buffer> parts) override;
  void divide(double* value, double divisor) override { *value /= divisor; }
  void set_clip_factor(StepScalars* scalars, double clip) override;
  void synchronize() override {}
  LayerKernels<float>& layer_kernels() override { return kernels_; }
  // The bf16-storage reference (exec/host_bf16_kernels.hpp), which keeps its widening scratch
  // between calls.
  LayerKernels<float, Bf16>* bf16_layer_kernels() override { return &bf16_kernels_; }

  // The sum of squares in double precision, in fixed blocks (exec/ordered_sum.hpp): its bits do
  // not depend on the thread count.
  double sum_squares(Buffer values) const;

 private:
  HostLayerKernels<float> kernels_;
  HostBf16LayerKernels bf16_kernels_;
};

}  // namespace st
