#pragma once
// CudaExec's private state, shared by the files that implement it (not a public header).
#include <cublas_v2.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "exec/cuda/cuda_bf16_layer_kernels.hpp"
#include "exec/cuda/cuda_exec.hpp"
#include "exec/cuda/cuda_layer_kernels.hpp"
#include "exec/kernel_scratch.hpp"  // kSumSquaresBlocks

namespace st {

// Bytes held in blocks from CudaExec::allocate. Shared with each block's deleter, so a block that
// outlives its backend still counts itself out safely.
struct CudaAllocationCounters {
  std::atomic<std::uint64_t> allocated{0}, peak{0};
};

struct CudaExec::State {
  State() = default;
  ~State();  // frees what is set; never throws
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  cublasHandle_t cublas = nullptr;
  void* cublas_workspace = nullptr;  // fixed, so cuBLAS results do not depend on a shared pool
  double* reduce_scratch = nullptr;  // add_sum_squares: one partial per block, then the parts' sum
  std::shared_ptr<CudaAllocationCounters> counters = std::make_shared<CudaAllocationCounters>();
  std::unique_ptr<CudaLayerKernels> kernels;
  // bf16 activations' kernels (parallel.activations = "bf16"): made with bf16 matmuls, flash
  // attention and the fused classifier, which they are built on, on an sm_80 or later device;
  // null otherwise.
  std::unique_ptr<CudaBf16LayerKernels> bf16_kernels;
};


}  // namespace st
