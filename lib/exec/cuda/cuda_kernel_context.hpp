#pragma once
// What the CUDA layer kernels of both storage types share (cuda_layer_kernels.hpp: fp32
// activations; cuda_bf16_layer_kernels.hpp: bf16 activations): the device, its compute stream and
// cuBLAS handle, the grow-only scratch blocks kernel_scratch sizes (the encoder's sort, the chunk
// sums of parameter gradients, the rows' losses), and the helpers that use them. The kernels
// themselves are templates on the storage type (storage.cuh), queued through this context from
// the .cu files of each kind of layer.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "exec/cuda/cuda_checks.hpp"
#include "exec/cuda/device_scratch.hpp"
#include "exec/kernel_scratch.hpp"
#include "exec/layer_kernels.hpp"

namespace st {

class CudaKernelContext {
 public:
  CudaKernelContext(int device_index, cudaStream_t compute_stream, cublasHandle_t cublas_handle)
      : device(device_index), stream(compute_stream), cublas(cublas_handle) {}

  // The device made current for the calling thread (callers may be on any thread).
  void use_device() const { ST_CHECK_CUDA(cudaSetDevice(device)); }

  // Reserves the blocks of kernel_scratch(workload, choices), with cub's own figure for the
  // token sort; a block only grows, so with several models on these kernels each is the largest
  // asked. Returns the sizes reserved (the caller reserves its own blocks, e.g. the bf16
  // operands of Bf16Matmuls, from them).
  const KernelScratch& reserve(const KernelWorkload& workload, KernelScratchChoices choices);

  // Scratch for the chunk sums of a parameter gradient over N rows of C columns: null without
  // a gradient (`wanted` false) or rows. add_bias_partials adds them to dst in the fixed order.
  float* bias_partials(bool wanted, int N, int C);
  void add_bias_partials(float* dst, const float* partials, int N, int C);
  // loss: adds the sum of row_losses[0..N), in a fixed order, divided, on the device.
  void add_row_losses(const double* row_losses, int N, LossSum loss);

  int device;
  cudaStream_t stream;
  cublasHandle_t cublas;
  KernelScratch reserved;  // what reserve took, block by block
  DeviceScratch sort_keys, sort_values, sort_temp, partials, row_losses;
};

}  // namespace st
