#pragma once
// Reductions inside a warp and a block, and launch sizing, for the CUDA backend's kernels.
// Every reduction combines values in a fixed tree that depends only on the block shape, so
// results are the same bits on every run (no atomics, no order that depends on timing).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "exec/kernel_scratch.hpp"

namespace st::cuda_detail {

inline constexpr int kWarp = 32;
inline constexpr int kBlock = 256;

// Blocks of kBlock threads for a grid-stride loop over n elements (n > 0).
inline unsigned grid_for(std::size_t n, std::size_t max_blocks = 1u << 16) {
  return static_cast<unsigned>(std::min<std::size_t>((n + kBlock - 1) / kBlock, max_blocks));
}

struct Sum {
  template <class T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  template <class T>
  __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};

// Butterfly over the 32 lanes: every lane ends with the same value.
template <class T, class Op>
__device__ T warp_reduce(T value, Op op) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// Across the block (blockDim.x a multiple of 32, at most 1024): every thread gets the result.
// Every thread of the block must call it; `shared` holds 32 values.
template <class T, class Op>
__device__ T block_reduce(T value, Op op, T identity, T* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  value = warp_reduce(value, op);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  value = lane < warps ? shared[lane] : identity;
  return warp_reduce(value, op);
}

// *into (+)= (the sum of values[0, n)) / divisor, by one block in a fixed order (deterministic):
// `add` adds to *into, else sets it. Launch with <<<1, threads>>>, threads a multiple of 32 up to
// 1024. A template, so each .cu file that uses it has its own instance.
template <class Index>
__global__ void sum_in_one_block(double* into, const double* values, Index n, double divisor, bool add) {
  __shared__ double shared[kWarp];
  double sum = 0;
  for (Index i = threadIdx.x; i < n; i += blockDim.x) sum += values[i];
  sum = block_reduce(sum, Sum{}, 0.0, shared);
  if (threadIdx.x == 0) *into = add ? *into + sum / divisor : sum / divisor;
}

// Parameter gradients sum over rows in chunks of kRowsPerChunk rows (exec/kernel_scratch.hpp).
using ::st::kRowsPerChunk;

// Lanes per column when the chunks' partial sums are added: lane y sums chunks y, y + lanes, ...
// in order, then the lanes' sums are added in lane order. A fixed tree, with a block of 32
// columns x 16 lanes where one thread per column looped over every chunk (a few blocks for a
// layer's columns: 3 at d_model 768).
inline constexpr int kPartialLanes = 16;

// dst[c] += the chunks' partial sums of column c (partials[chunk, c]), in add_partials' order. A
// template for the same reason as sum_in_one_block. Blocks of kWarp x kPartialLanes threads.
template <class Real>
__global__ void add_partials_kernel(Real* dst, const Real* partials, int chunks, int C) {
  __shared__ Real lanes[kPartialLanes][kWarp + 1];
  const int c = blockIdx.x * kWarp + threadIdx.x;
  Real sum = 0;
  if (c < C)
    for (int k = threadIdx.y; k < chunks; k += kPartialLanes) sum += partials[static_cast<std::size_t>(k) * C + c];
  lanes[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    Real total = lanes[0][threadIdx.x];
    for (int y = 1; y < kPartialLanes; ++y) total += lanes[y][threadIdx.x];
    dst[c] += total;
  }
}

// Queues add_partials_kernel over C columns (nothing for C == 0). Launch checked by the caller.
template <class Real>
void add_partials(Real* dst, const Real* partials, int chunks, int C, cudaStream_t stream) {
  if (C <= 0) return;
  add_partials_kernel<<<static_cast<unsigned>((C + kWarp - 1) / kWarp), dim3(kWarp, kPartialLanes), 0, stream>>>(
      dst, partials, chunks, C);
}

}  // namespace st::cuda_detail
