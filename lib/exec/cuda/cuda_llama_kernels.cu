// CudaLayerKernels: the kernels Llama adds to GPT-2's (RMSNorm, rotary position embeddings,
// the SwiGLU gate) on one device. Each matches the host kernel of the same name in
// exec/host_llama_kernels.cpp: which outputs it overwrites and which it adds to, the layouts.
// Deterministic as the rest of the backend: RMSNorm's weight gradient is summed over rows in
// fixed chunks in the pass that gives the input's gradient, then the chunks in order
// (device_reduce.cuh); everything else is element-wise.
#include <cmath>

#include "exec/cuda/cuda_checks.hpp"
#include "exec/cuda/cuda_layer_kernels.hpp"
#include "exec/cuda/device_reduce.cuh"

namespace st {
namespace {

using namespace cuda_detail;

unsigned warp_rows(int rows) {
  const int rows_per_block = kBlock / kWarp;
  return static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
}

// out = in * rstd * weight, rstd = 1 / sqrt(mean(in^2) + eps); one warp per row (any C). With
// `b` (not null) the row normalised is in + b, written to `res` first (a residual add fused with
// the norm after it, as layernorm_forward_kernel's).
__global__ void rmsnorm_forward_kernel(float* out, float* rstd, float* res, const float* in, const float* b,
                                       const float* weight, int N, int C, float eps) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= N) return;  // the whole warp leaves together
  const std::size_t offset = static_cast<std::size_t>(row) * C;
  const float* x = in + offset;
  float squares = 0;
  if (b) {
    float* r = res + offset;
    for (int c = lane; c < C; c += kWarp) {
      r[c] = x[c] + b[offset + c];
      squares += r[c] * r[c];
    }
    x = r;
  } else {
    for (int c = lane; c < C; c += kWarp) squares += x[c] * x[c];
  }
  const float s = 1.0f / sqrtf(warp_reduce(squares, Sum{}) / C + eps);
  float* o = out + offset;
  for (int c = lane; c < C; c += kWarp) o[c] = x[c] * s * weight[c];
  if (lane == 0) rstd[row] = s;
}

// RMSNorm backward in one pass over a chunk of kRowsPerChunk rows (blockIdx.x), as
// layernorm_backward_kernel: din += s (dout w - xhat <dout w, xhat> / C) with xhat = x s, and the
// chunk's partial sums of dout xhat per column, added in row order.
__global__ void rmsnorm_backward_kernel(float* __restrict__ din, float* __restrict__ partials,
                                        const float* __restrict__ dout, const float* __restrict__ in,
                                        const float* __restrict__ weight, const float* __restrict__ rstd, int N,
                                        int C) {
  __shared__ float row_b[kRowsPerChunk];
  const int begin = blockIdx.x * kRowsPerChunk, rows = min(N - begin, kRowsPerChunk);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  for (int k = warp; k < rows; k += warps) {
    const std::size_t offset = static_cast<std::size_t>(begin + k) * C;
    const float s = rstd[begin + k];
    float dnorm_xhat = 0;
    for (int c = lane; c < C; c += kWarp) dnorm_xhat += dout[offset + c] * weight[c] * (in[offset + c] * s);
    const float b = warp_reduce(dnorm_xhat, Sum{}) / C;
    if (lane == 0) row_b[k] = b;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float w = weight[c];
    float sum = 0;
    for (int k = 0; k < rows; ++k) {
      const std::size_t i = static_cast<std::size_t>(begin + k) * C + c;
      const float s = rstd[begin + k], x = in[i], d = dout[i];
      din[i] += s * (d * w - x * s * row_b[k]);
      sum += d * (x * s);
    }
    partials[static_cast<std::size_t>(blockIdx.x) * C + c] = sum;
  }
}

// Rotate-half in place: one thread per (row, head, pair i < hs/2); channel i of a head pairs with
// i + hs/2, row b*T + t sits at position first + t. sign -1: the transposed rotation.
__global__ void rope_kernel(float* x, const float* cosines, const float* sines, int rows, int T, int first, int W,
                            int heads, int hs, float sign) {
  const int half = hs / 2;
  const std::size_t n = static_cast<std::size_t>(rows) * heads * half;
  for (std::size_t e = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; e < n; e += std::size_t{gridDim.x} * blockDim.x) {
    const int i = static_cast<int>(e % half);
    const std::size_t row_head = e / half;
    const int h = static_cast<int>(row_head % heads);
    const std::size_t row = row_head / heads;
    const std::size_t at = static_cast<std::size_t>(first + static_cast<int>(row % T)) * half + i;
    const float c = cosines[at], sn = sign * sines[at];
    float* v = x + row * W + static_cast<std::size_t>(h) * hs;
    const float x1 = v[i], x2 = v[i + half];
    v[i] = x1 * c - x2 * sn;
    v[i + half] = x2 * c + x1 * sn;
  }
}

// The logistic function from e^-|x| (never overflows).
__device__ inline float sigmoid(float x) {
  const float z = expf(-fabsf(x));
  return x < 0 ? z / (1.0f + z) : 1.0f / (1.0f + z);
}

// out[n, i] = silu(gate) * up, gate = in[n, i], up = in[n, F + i].
__global__ void swiglu_forward_kernel(float* out, const float* in, int N, int F) {
  const std::size_t n = static_cast<std::size_t>(N) * F;
  for (std::size_t e = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; e < n; e += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t row = e / F, i = e % F;
    const float g = in[row * 2 * F + i], u = in[row * 2 * F + F + i];
    out[e] = g * sigmoid(g) * u;
  }
}

// din[n, :] = the gradient of gate and up (overwritten).
__global__ void swiglu_backward_kernel(float* din, const float* in, const float* dout, int N, int F) {
  const std::size_t n = static_cast<std::size_t>(N) * F;
  for (std::size_t e = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; e < n; e += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t row = e / F, i = e % F;
    const std::size_t gate = row * 2 * F + i, up = gate + F;
    const float g = in[gate], u = in[up], sg = sigmoid(g), d = dout[e];
    din[up] = d * g * sg;
    din[gate] = d * u * sg * (1.0f + g * (1.0f - sg));
  }
}

}  // namespace

void CudaLayerKernels::rmsnorm_forward(float* out, float* rstd, const float* in, const float* weight, int N, int C,
                                       double eps) {
  use_device();
  if (N == 0) return;
  rmsnorm_forward_kernel<<<warp_rows(N), kBlock, 0, stream_>>>(out, rstd, nullptr, in, nullptr, weight, N, C,
                                                               static_cast<float>(eps));
  ST_CHECK_LAUNCH();
}

void CudaLayerKernels::residual_rmsnorm_forward(float* res, float* out, float* rstd, const float* a, const float* b,
                                                const float* weight, int N, int C, double eps) {
  use_device();
  if (N == 0) return;
  rmsnorm_forward_kernel<<<warp_rows(N), kBlock, 0, stream_>>>(out, rstd, res, a, b, weight, N, C,
                                                               static_cast<float>(eps));
  ST_CHECK_LAUNCH();
}

void CudaLayerKernels::rmsnorm_backward(float* din, float* dweight, const float* dout, const float* in,
                                        const float* weight, const float* rstd, int N, int C) {
  use_device();
  if (N == 0 || C == 0) return;
  const int chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  float* partials = partials_.get<float>(static_cast<std::size_t>(chunks) * C, stream_);
  rmsnorm_backward_kernel<<<static_cast<unsigned>(chunks), kBlock, 0, stream_>>>(din, partials, dout, in, weight, rstd,
                                                                                 N, C);
  ST_CHECK_LAUNCH();
  add_partials(dweight, partials, chunks, C, stream_);
  ST_CHECK_LAUNCH();
}

void CudaLayerKernels::rope(float* x, const float* cosines, const float* sines, int B, int T, int first, int W,
                            int heads, int hs, bool inverse) {
  use_device();
  const std::size_t n = static_cast<std::size_t>(B) * T * heads * (hs / 2);
  if (n == 0) return;
  rope_kernel<<<grid_for(n), kBlock, 0, stream_>>>(x, cosines, sines, B * T, T, first, W, heads, hs,
                                                   inverse ? -1.0f : 1.0f);
  ST_CHECK_LAUNCH();
}

void CudaLayerKernels::swiglu_forward(float* out, const float* in, int N, int F) {
  use_device();
  const std::size_t n = static_cast<std::size_t>(N) * F;
  if (n == 0) return;
  swiglu_forward_kernel<<<grid_for(n), kBlock, 0, stream_>>>(out, in, N, F);
  ST_CHECK_LAUNCH();
}

void CudaLayerKernels::swiglu_backward(float* din, const float* in, const float* dout, int N, int F) {
  use_device();
  const std::size_t n = static_cast<std::size_t>(N) * F;
  if (n == 0) return;
  swiglu_backward_kernel<<<grid_for(n), kBlock, 0, stream_>>>(din, in, dout, N, F);
  ST_CHECK_LAUNCH();
}

}  // namespace st
