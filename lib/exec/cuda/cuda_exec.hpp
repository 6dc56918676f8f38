#pragma once
// The CUDA backend (ST_ENABLE_CUDA builds): one device per rank and a compute stream on which the
// model's kernels, the strategy's element-wise work and AdamW are queued in order. Collectives
// are not queued here: each device communicator (comm/nccl_communicator.hpp) runs them on a
// stream of its own, after the marker before_communication() records (an event, no host
// wait), so NCCL overlaps with the compute queued after it. A collective's request completes
// only once its stream has finished, so synchronize() has no collective to wait for.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "exec/exec.hpp"

namespace st {

struct CudaExecSettings {
  int device = 0;             // CUDA device index among the visible ones
  bool bf16_matmuls = false;  // matmuls with bf16 inputs and fp32 accumulation (else fp32)
  // With bf16_matmuls: training attention as flash attention (exec/cuda/flash_attention.hpp) for
  // the head widths it has kernels for; false keeps the exact path (T x T probabilities through
  // cuBLAS), as fp32 always does. make_execution sets it from parallel.attention.
  bool flash_attention = false;
  // With bf16_matmuls: the fused classifier (LayerKernels::fused_classifier: bf16 logits, the
  // cross-entropy in one kernel per row, exec/cuda/classifier.cu); false keeps fp32 logits and
  // the unfused kernels, as fp32 always does. make_execution sets it from parallel.classifier.
  bool fused_classifier = true;
  // With bf16_matmuls: GPT-2's GELU in cuBLASLt's epilogues (LayerKernels::linear_gelu_forward,
  // linear_backward_gelu); make_execution sets it from parallel.gelu_fusion.
  bool gelu_fusion = false;
  // Wait for and check every kernel and cuBLAS call where it is launched (cuda_checks.hpp
  // sync_every_launch); make_execution sets it from parallel.sync_every_launch.
  bool sync_every_launch = false;
};

class CudaExec final : public Exec {
 public:
  explicit CudaExec(const CudaExecSettings& settings);
  ~CudaExec() override;
  CudaExec(const CudaExec&) = delete;
  CudaExec& operator=(const CudaExec&) = delete;

  MemorySpace space() const override { return MemorySpace::device; }
  std::string description() const override;
  Memory allocate(std::size_t bytes) override;
  void zero(void* data, std::size_t bytes) override;
  void copy(void* to, const void* from, std::size_t bytes) override;
  void upload(void* to, const void* host_from, std::size_t bytes) override;
  void download(void* host_to, const void* from, std::size_t bytes) override;
  void convert(Buffer to, Buffer from) override;
  void accumulate(Buffer into, const float* from) override;
  void adamw(const AdamWStepConstants& c, const AdamWTile* tiles, std::size_t tile_count, float* params, Buffer grads,
             float* m, float* v, const float* grad_scale) override;
  void add_sum_squares(double* total, std::span<const Buffer> parts) override;
  void divide(double* value, double divisor) override;
  void set_clip_factor(StepScalars* scalars, double clip) override;
  void synchronize() override;
  const void* before_communication() override;
  LayerKernels<float>& layer_kernels() override;
  // With bf16 matmuls, flash attention and the fused classifier (what bf16 storage is built on)
  // on a device with bf16 tensor cores (compute capability 8.0 or later); else null.
  LayerKernels<float, Bf16>* bf16_layer_kernels() override;

  int device() const { return settings_.device; }
  cudaStream_t compute_stream() const { return compute_; }
  // Makes `stream` (a communicator's own) wait, without a host wait, for the work `ready` marks
  // (a marker from before_communication()), or, without one, for every kernel queued on the
  // compute stream so far.
  void order_after_compute(cudaStream_t stream, const void* ready = nullptr);
  // Bytes this backend holds now, and the most it held at once, in blocks from allocate() (not
  // counted: cuBLAS's 32 MiB workspace and the kernels' grow-only scratch).
  std::uint64_t allocated_bytes() const;
  std::uint64_t peak_allocated_bytes() const;
  // The matmul rate of this device for an m x n x k GEMM at the precision of this backend's
  // matmuls, in FLOP/s: the best of several timed repetitions (the MFU yardstick).
  double measure_gemm_flops(int m, int n, int k);

 private:
  struct State;  // cuBLAS handle, workspace, kernels, byte counters: exec/cuda/cuda_exec_state.hpp
  CudaExecSettings settings_;
  cudaStream_t compute_ = nullptr;
  cudaEvent_t ready_ = nullptr;  // order_after_compute()'s event when no marker is given
  // before_communication()'s markers, used in turn: a marker recorded again before its
  // collective waited on it only makes that collective wait for more (never for less).
  std::vector<cudaEvent_t> markers_;
  std::size_t next_marker_ = 0;
  std::unique_ptr<State> state_;
  // upload()'s pinned slots, used in turn: a small upload (a micro-batch's tokens) is copied into
  // one and queued from there, so the host waits neither for the stream (a copy from pageable
  // memory synchronises it first) nor for the copy. Each slot's event marks its last copy done.
  struct StagingSlot {
    void* pinned = nullptr;
    cudaEvent_t copied = nullptr;
  };
  std::vector<StagingSlot> staging_;
  std::size_t next_staging_ = 0;
  void release() noexcept;  // frees whatever the constructor got so far (destructor, failed constructor)
  // measure_gemm_flops' timing, on blocks of its own that are freed when it returns.
  double timed_gemm_flops(int m, int n, int k);
  // Makes this backend's device the calling thread's current one (the CUDA runtime keeps it per
  // thread, and a caller may come from another thread than the constructor's).
  void use_device() const;
};

}  // namespace st
