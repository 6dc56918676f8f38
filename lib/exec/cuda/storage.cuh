#pragma once
// Reading and writing the layer kernels' storage types on the device (exec/layer_kernels.hpp's S):
// fp32 as it is, bf16 widened exactly on the way in and rounded once, to nearest even, on the way
// out (as the host's st::to_bf16 and exec/host_bf16_kernels.hpp). A kernel written once with
// load() and stored<S>() is the fp32 kernel for S = float, instruction for instruction, and the
// bf16-storage kernel for S = Bf16, computing in fp32 in between.
#include <cuda_runtime.h>

#include "core/bf16.hpp"
#include "exec/cuda/bf16_bits.cuh"

namespace st::cuda_detail {

__device__ __forceinline__ float load(float x) { return x; }
__device__ __forceinline__ float load(Bf16 x) { return bf16_bits_to_f32(x.bits); }

template <class S>
__device__ __forceinline__ S stored(float v);
template <>
__device__ __forceinline__ float stored<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ Bf16 stored<Bf16>(float v) {
  return Bf16{f32_to_bf16_bits(v)};
}

}  // namespace st::cuda_detail
