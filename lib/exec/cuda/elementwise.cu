// The strategy's element-wise arithmetic on the device: conversion between fp32 and bf16,
// gradient accumulation, the sum of squares (for the gradient norm), the step's scalars and AdamW. Compiled without
// fused multiply-adds (see lib/exec/CMakeLists.txt) so that each result is the host's bit for bit
// (HostExec in exec/host_exec.cpp), except sum_squares, whose order of addition differs.
#include <algorithm>
#include <cstdint>

#include "core/error.hpp"
#include "exec/adamw_element.hpp"
#include "exec/cuda/bf16_bits.cuh"
#include "exec/cuda/cuda_checks.hpp"
#include "exec/cuda/cuda_exec.hpp"
#include "exec/cuda/cuda_exec_state.hpp"
#include "exec/cuda/device_reduce.cuh"
#include "exec/cuda/row_ops.cuh"

namespace st {
namespace {

using namespace cuda_detail;

// Element-wise conversions; any n (grid-stride loops).
__global__ void f32_to_bf16_kernel(std::uint16_t* out, const float* in, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    out[i] = f32_to_bf16_bits(in[i]);
}
__global__ void bf16_to_f32_kernel(float* out, const std::uint16_t* in, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    out[i] = bf16_bits_to_f32(in[i]);
}

// into += from: fp32 adds; bf16 adds in fp32 and rounds once.
__global__ void accumulate_f32_kernel(float* into, const float* from, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    into[i] += from[i];
}
__global__ void accumulate_bf16_kernel(std::uint16_t* into, const float* from, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    into[i] = f32_to_bf16_bits(bf16_bits_to_f32(into[i]) + from[i]);
}

// An element as HostExec's sum_squares reads it: widened to float first (f64 is narrowed, as there).
template <class T>
__device__ inline float load_as_float(const T* p, std::size_t i);
template <>
__device__ inline float load_as_float<float>(const float* p, std::size_t i) { return p[i]; }
template <>
__device__ inline float load_as_float<double>(const double* p, std::size_t i) { return static_cast<float>(p[i]); }
template <>
__device__ inline float load_as_float<std::uint16_t>(const std::uint16_t* p, std::size_t i) {
  return bf16_bits_to_f32(p[i]);
}

// Sum of squares, first pass: block b sums, in double, the elements i = b*kBlock + thread + k*stride
// in increasing k, then reduces in a fixed tree. The grid size depends only on n, so the result
// does not depend on timing. Launch with kBlock threads.
template <class T>
__global__ void sum_squares_partials_kernel(double* partials, const T* values, std::size_t n) {
  __shared__ double shared[kWarp];
  double sum = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    const double x = load_as_float(values, i);
    sum += x * x;
  }
  sum = block_reduce(sum, Sum{}, 0.0, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}


// Element g of a gradient as AdamW reads it: fp32, or bf16 widened exactly.
__device__ inline float gradient_at(const float* g, std::size_t i) { return g[i]; }
__device__ inline float gradient_at(const std::uint16_t* g, std::size_t i) { return bf16_bits_to_f32(g[i]); }

// AdamW over the tiles (exec/adamw_element.hpp, shared with the host): block b takes tiles b,
// b + gridDim.x, ...; its threads stride over the tile. A NaN factor leaves everything unchanged.
template <class G>
__global__ void adamw_tiles_kernel(AdamWStepConstants c, const AdamWTile* tiles, std::size_t tile_count, float* params,
                                   const G* grads, float* m, float* v, const float* grad_scale) {
  const float scale = *grad_scale;
  if (scale != scale) return;
  for (std::size_t t = blockIdx.x; t < tile_count; t += gridDim.x) {
    const AdamWTile tile = tiles[t];
    const float decay_factor = c.decay_factor[tile.decay];
    for (std::uint32_t i = threadIdx.x; i < tile.count; i += blockDim.x)
      adamw_element(params[tile.param + i], gradient_at(grads, tile.grad + i), m[tile.state + i], v[tile.state + i],
                    c.beta1, c.beta2, scale, decay_factor, c.step_size, c.inv_correction2, c.eps);
  }
}

__global__ void divide_kernel(double* value, double divisor) { *value /= divisor; }

__global__ void clip_factor_kernel(StepScalars* scalars, double clip) {
  scalars->grad_scale = clip_factor(scalars->loss, scalars->grad_norm_squared, clip);
}

// One thread per column and chunk of kRowsPerChunk rows (blockIdx.y): the rows rounded, their
// column sum kept (a warp's 32 columns are adjacent: the reads and writes coalesce).
__global__ void round_rows_kernel(std::uint16_t* out, float* partials, const float* in, int rows, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int begin = blockIdx.y * kRowsPerChunk, end = min(rows, begin + kRowsPerChunk);
  float sum = 0;
  for (int row = begin; row < end; ++row) {
    const std::size_t i = static_cast<std::size_t>(row) * cols + c;
    const float v = in[i];
    out[i] = f32_to_bf16_bits(v);
    sum += v;
  }
  if (partials) partials[static_cast<std::size_t>(blockIdx.y) * cols + c] = sum;
}

template <class T>
__global__ void broadcast_rows_kernel(T* out, const T* row, int N, int C) {
  const std::size_t n = std::size_t{1} * N * C;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    out[i] = row[i % C];
}

template <class T>
void queue_broadcast_rows(T* out, const T* row, int N, int C, cudaStream_t stream) {
  const std::size_t n = std::size_t{1} * N * C;
  if (n == 0) return;
  broadcast_rows_kernel<<<grid_for(n), kBlock, 0, stream>>>(out, row, N, C);
  ST_CHECK_LAUNCH();
}

}  // namespace

void cuda_detail::broadcast_rows(float* out, const float* row, int N, int C, cudaStream_t stream) {
  queue_broadcast_rows(out, row, N, C, stream);
}
void cuda_detail::broadcast_rows(Bf16* out, const Bf16* row, int N, int C, cudaStream_t stream) {
  queue_broadcast_rows(out, row, N, C, stream);
}

void cuda_detail::round_rows_to_bf16(std::uint16_t* out, float* partials, const float* in, int rows, int cols,
                                     cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const int chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  ST_REQUIRE(chunks <= 65535, "bf16 rounding with column sums: more rows than its chunks allow");
  const dim3 grid(static_cast<unsigned>((cols + kBlock - 1) / kBlock), static_cast<unsigned>(chunks));
  round_rows_kernel<<<grid, kBlock, 0, stream>>>(out, partials, in, rows, cols);
  ST_CHECK_LAUNCH();
}

void cuda_detail::round_to_bf16(std::uint16_t* out, const float* in, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  f32_to_bf16_kernel<<<grid_for(n), kBlock, 0, stream>>>(out, in, n);
  ST_CHECK_LAUNCH();
}

void CudaExec::convert(Buffer to, Buffer from) {
  use_device();
  ST_REQUIRE(to.count == from.count, "convert: buffers differ in length");
  if (to.type == from.type) return copy(to.data, from.data, to.bytes());
  ST_REQUIRE(to.type != DataType::f64 && from.type != DataType::f64, "convert: f32 and bf16 only");
  const std::size_t n = to.count;
  if (n == 0) return;
  if (to.type == DataType::bf16)
    return round_to_bf16(static_cast<std::uint16_t*>(to.data), static_cast<const float*>(from.data), n, compute_);
  bf16_to_f32_kernel<<<grid_for(n), kBlock, 0, compute_>>>(static_cast<float*>(to.data),
                                                           static_cast<const std::uint16_t*>(from.data), n);
  ST_CHECK_LAUNCH();
}

void CudaExec::accumulate(Buffer into, const float* from) {
  use_device();
  const std::size_t n = into.count;
  ST_REQUIRE(into.type == DataType::f32 || into.type == DataType::bf16, "accumulate: f32 or bf16 only");
  if (n == 0) return;
  if (into.type == DataType::bf16)
    accumulate_bf16_kernel<<<grid_for(n), kBlock, 0, compute_>>>(static_cast<std::uint16_t*>(into.data), from, n);
  else
    accumulate_f32_kernel<<<grid_for(n), kBlock, 0, compute_>>>(static_cast<float*>(into.data), from, n);
  ST_CHECK_LAUNCH();
}

void CudaExec::add_sum_squares(double* total, std::span<const Buffer> parts) {
  use_device();
  // partials: one double per block of a part's first pass; part_sum: the parts added in order
  // (needed only with several parts, as the host adds them before adding to the total).
  double* partials = state_->reduce_scratch;
  double* part_sum = partials + kSumSquaresBlocks;
  bool first = true;
  for (const Buffer& values : parts) {
    const std::size_t n = values.count;
    if (n == 0) continue;
    const unsigned blocks = grid_for(n, kSumSquaresBlocks);
    switch (values.type) {
      case DataType::f32:
        sum_squares_partials_kernel<<<blocks, kBlock, 0, compute_>>>(partials, static_cast<const float*>(values.data), n);
        break;
      case DataType::f64:
        sum_squares_partials_kernel<<<blocks, kBlock, 0, compute_>>>(partials, static_cast<const double*>(values.data), n);
        break;
      case DataType::bf16:
        sum_squares_partials_kernel<<<blocks, kBlock, 0, compute_>>>(partials,
                                                                     static_cast<const std::uint16_t*>(values.data), n);
        break;
    }
    ST_CHECK_LAUNCH();
    const bool alone = parts.size() == 1;
    sum_in_one_block<<<1, kBlock, 0, compute_>>>(alone ? total : part_sum, partials, blocks, 1.0, alone || !first);
    ST_CHECK_LAUNCH();
    first = false;
  }
  if (parts.size() > 1 && !first) {
    sum_in_one_block<<<1, kWarp, 0, compute_>>>(total, part_sum, 1u, 1.0, true);
    ST_CHECK_LAUNCH();
  }
}

void CudaExec::divide(double* value, double divisor) {
  use_device();
  divide_kernel<<<1, 1, 0, compute_>>>(value, divisor);
  ST_CHECK_LAUNCH();
}

void CudaExec::set_clip_factor(StepScalars* scalars, double clip) {
  use_device();
  clip_factor_kernel<<<1, 1, 0, compute_>>>(scalars, clip);
  ST_CHECK_LAUNCH();
}

void CudaExec::adamw(const AdamWStepConstants& c, const AdamWTile* tiles, std::size_t tile_count, float* params,
                     Buffer grads, float* m, float* v, const float* grad_scale) {
  use_device();
  if (tile_count == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>(tile_count, 1u << 16));
  if (grads.type == DataType::bf16)
    adamw_tiles_kernel<<<blocks, kBlock, 0, compute_>>>(c, tiles, tile_count, params,
                                                        static_cast<const std::uint16_t*>(grads.data), m, v, grad_scale);
  else if (grads.type == DataType::f32)
    adamw_tiles_kernel<<<blocks, kBlock, 0, compute_>>>(c, tiles, tile_count, params,
                                                        static_cast<const float*>(grads.data), m, v, grad_scale);
  else throw Error("adamw: gradients are f32 or bf16");
  ST_CHECK_LAUNCH();
}

}  // namespace st
