#pragma once
// st::to_bf16 (core/bf16.hpp) on the device: round to nearest even; a NaN stays a (quiet) NaN.
// Shared by the strategies' conversions (elementwise.cu) and the bf16 matmul operands
// (bf16_matmuls.cu), so both round as the host does.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace st::cuda_detail {

__device__ inline std::uint16_t f32_to_bf16_bits(float f) {
  std::uint32_t u = __float_as_uint(f);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu)) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
__device__ inline float bf16_bits_to_f32(std::uint16_t bits) {
  return __uint_as_float(static_cast<std::uint32_t>(bits) << 16);
}

// out[i] = f32_to_bf16_bits(in[i]) for the n elements, queued on `stream` (elementwise.cu).
void round_to_bf16(std::uint16_t* out, const float* in, std::size_t n, cudaStream_t stream);
// The same over rows x cols, and, where `partials` is not null, in the same pass the fp32 sums
// of each column over each chunk of kRowsPerChunk rows, in row order (partials[chunk, col]):
// the sums the layer kernels' column_partials_kernel makes, so a bias gradient costs no second
// read of its rows. At most 65535 chunks.
void round_rows_to_bf16(std::uint16_t* out, float* partials, const float* in, int rows, int cols, cudaStream_t stream);

}  // namespace st::cuda_detail
