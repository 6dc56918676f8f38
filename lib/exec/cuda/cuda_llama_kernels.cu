// CudaLayerKernels and CudaBf16LayerKernels: the kernels Llama adds to GPT-2's (RMSNorm, rotary
// position embeddings, the SwiGLU gate) on one device, templates on the storage type
// (storage.cuh) as cuda_layer_kernels.cu's. Each matches the host kernel of the same name in
// exec/host_llama_kernels.cpp: which outputs it overwrites and which it adds to, the layouts.
// Deterministic as the rest of the backend: RMSNorm's weight gradient is summed over rows in
// fixed chunks in the pass that gives the input's gradient, then the chunks in order
// (device_reduce.cuh); everything else is element-wise.
#include <cmath>

#include "exec/cuda/cuda_bf16_layer_kernels.hpp"
#include "exec/cuda/cuda_checks.hpp"
#include "exec/cuda/cuda_layer_kernels.hpp"
#include "exec/cuda/device_reduce.cuh"
#include "exec/cuda/storage.cuh"

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
template <class S>
__global__ void rmsnorm_forward_kernel(S* out, float* rstd, S* res, const S* in, const S* b, const S* weight, int N,
                                       int C, float eps) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= N) return;  // the whole warp leaves together
  const std::size_t offset = static_cast<std::size_t>(row) * C;
  const S* x = in + offset;
  float squares = 0;
  if (b) {
    S* r = res + offset;
    for (int c = lane; c < C; c += kWarp) {
      r[c] = stored<S>(load(x[c]) + load(b[offset + c]));
      squares += load(r[c]) * load(r[c]);
    }
    x = r;
  } else {
    for (int c = lane; c < C; c += kWarp) squares += load(x[c]) * load(x[c]);
  }
  const float s = 1.0f / sqrtf(warp_reduce(squares, Sum{}) / C + eps);
  S* o = out + offset;
  for (int c = lane; c < C; c += kWarp) o[c] = stored<S>(load(x[c]) * s * load(weight[c]));
  if (lane == 0) rstd[row] = s;
}

// RMSNorm backward in one pass over a chunk of kRowsPerChunk rows (blockIdx.x), as
// layernorm_backward_kernel: din += s (dout w - xhat <dout w, xhat> / C) with xhat = x s, and the
// chunk's partial sums of dout xhat per column, added in row order.
template <class S>
__global__ void rmsnorm_backward_kernel(S* __restrict__ din, float* __restrict__ partials, const S* __restrict__ dout,
                                        const S* __restrict__ in, const S* __restrict__ weight,
                                        const float* __restrict__ rstd, int N, int C) {
  __shared__ float row_b[kRowsPerChunk];
  const int begin = blockIdx.x * kRowsPerChunk, rows = min(N - begin, kRowsPerChunk);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  for (int k = warp; k < rows; k += warps) {
    const std::size_t offset = static_cast<std::size_t>(begin + k) * C;
    const float s = rstd[begin + k];
    float dnorm_xhat = 0;
    for (int c = lane; c < C; c += kWarp)
      dnorm_xhat += load(dout[offset + c]) * load(weight[c]) * (load(in[offset + c]) * s);
    const float b = warp_reduce(dnorm_xhat, Sum{}) / C;
    if (lane == 0) row_b[k] = b;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float w = load(weight[c]);
    float sum = 0;
    for (int k = 0; k < rows; ++k) {
      const std::size_t i = static_cast<std::size_t>(begin + k) * C + c;
      const float s = rstd[begin + k], x = load(in[i]), d = load(dout[i]);
      din[i] = stored<S>(load(din[i]) + s * (d * w - x * s * row_b[k]));
      sum += d * (x * s);
    }
    partials[static_cast<std::size_t>(blockIdx.x) * C + c] = sum;
  }
}

// Rotate-half in place: one thread per (row, head, pair i < hs/2); channel i of a head pairs with
// i + hs/2, row b*T + t sits at position first + t. sign -1: the transposed rotation.
template <class S>
__global__ void rope_kernel(S* x, const float* cosines, const float* sines, int rows, int T, int first, int W,
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
    S* v = x + row * W + static_cast<std::size_t>(h) * hs;
    const float x1 = load(v[i]), x2 = load(v[i + half]);
    v[i] = stored<S>(x1 * c - x2 * sn);
    v[i + half] = stored<S>(x2 * c + x1 * sn);
  }
}

// The logistic function from e^-|x| (never overflows).
__device__ inline float sigmoid(float x) {
  const float z = expf(-fabsf(x));
  return x < 0 ? z / (1.0f + z) : 1.0f / (1.0f + z);
}

// out[n, i] = silu(gate) * up, gate = in[n, i], up = in[n, F + i].
template <class S>
__global__ void swiglu_forward_kernel(S* out, const S* in, int N, int F) {
  const std::size_t n = static_cast<std::size_t>(N) * F;
  for (std::size_t e = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; e < n; e += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t row = e / F, i = e % F;
    const float g = load(in[row * 2 * F + i]), u = load(in[row * 2 * F + F + i]);
    out[e] = stored<S>(g * sigmoid(g) * u);
  }
}

// din[n, :] = the gradient of gate and up (overwritten).
template <class S>
__global__ void swiglu_backward_kernel(S* din, const S* in, const S* dout, int N, int F) {
  const std::size_t n = static_cast<std::size_t>(N) * F;
  for (std::size_t e = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; e < n; e += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t row = e / F, i = e % F;
    const std::size_t gate = row * 2 * F + i, up = gate + F;
    const float g = load(in[gate]), u = load(in[up]), sg = sigmoid(g), d = load(dout[e]);
    din[up] = stored<S>(d * g * sg);
    din[gate] = stored<S>(d * u * sg * (1.0f + g * (1.0f - sg)));
  }
}

// rmsnorm_forward, and with `b` the residual add before it (res = in + b).
template <class S>
void queue_rmsnorm_forward(CudaKernelContext& k, S* out, float* rstd, S* res, const S* in, const S* b,
                           const S* weight, int N, int C, double eps) {
  k.use_device();
  if (N == 0) return;
  rmsnorm_forward_kernel<<<warp_rows(N), kBlock, 0, k.stream>>>(out, rstd, res, in, b, weight, N, C,
                                                                static_cast<float>(eps));
  ST_CHECK_LAUNCH();
}

template <class S>
void queue_rmsnorm_backward(CudaKernelContext& k, S* din, float* dweight, const S* dout, const S* in, const S* weight,
                            const float* rstd, int N, int C) {
  k.use_device();
  if (N == 0 || C == 0) return;
  const int chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  float* partials = k.partials.get<float>(static_cast<std::size_t>(chunks) * C, k.stream);
  rmsnorm_backward_kernel<<<static_cast<unsigned>(chunks), kBlock, 0, k.stream>>>(din, partials, dout, in, weight,
                                                                                  rstd, N, C);
  ST_CHECK_LAUNCH();
  add_partials(dweight, partials, chunks, C, k.stream);
  ST_CHECK_LAUNCH();
}

template <class S>
void queue_rope(CudaKernelContext& k, S* x, const float* cosines, const float* sines, int B, int T, int first, int W,
                int heads, int hs, bool inverse) {
  k.use_device();
  const std::size_t n = static_cast<std::size_t>(B) * T * heads * (hs / 2);
  if (n == 0) return;
  rope_kernel<<<grid_for(n), kBlock, 0, k.stream>>>(x, cosines, sines, B * T, T, first, W, heads, hs,
                                                    inverse ? -1.0f : 1.0f);
  ST_CHECK_LAUNCH();
}

template <class S>
void queue_swiglu_forward(CudaKernelContext& k, S* out, const S* in, int N, int F) {
  k.use_device();
  const std::size_t n = static_cast<std::size_t>(N) * F;
  if (n == 0) return;
  swiglu_forward_kernel<<<grid_for(n), kBlock, 0, k.stream>>>(out, in, N, F);
  ST_CHECK_LAUNCH();
}

template <class S>
void queue_swiglu_backward(CudaKernelContext& k, S* din, const S* in, const S* dout, int N, int F) {
  k.use_device();
  const std::size_t n = static_cast<std::size_t>(N) * F;
  if (n == 0) return;
  swiglu_backward_kernel<<<grid_for(n), kBlock, 0, k.stream>>>(din, in, dout, N, F);
  ST_CHECK_LAUNCH();
}

}  // namespace

void CudaLayerKernels::rmsnorm_forward(float* out, float* rstd, const float* in, const float* weight, int N, int C, double eps) {
  queue_rmsnorm_forward<float>(ctx_, out, rstd, nullptr, in, nullptr, weight, N, C, eps);
}

void CudaLayerKernels::residual_rmsnorm_forward(float* res, float* out, float* rstd, const float* a, const float* b, const float* weight,
                                     int N, int C, double eps) {
  queue_rmsnorm_forward(ctx_, out, rstd, res, a, b, weight, N, C, eps);
}

void CudaLayerKernels::rmsnorm_backward(float* din, float* dweight, const float* dout, const float* in, const float* weight,
                             const float* rstd, int N, int C) {
  queue_rmsnorm_backward(ctx_, din, dweight, dout, in, weight, rstd, N, C);
}

void CudaLayerKernels::rope(float* x, const float* cosines, const float* sines, int B, int T, int first, int W, int heads, int hs,
                 bool inverse) {
  queue_rope(ctx_, x, cosines, sines, B, T, first, W, heads, hs, inverse);
}

void CudaLayerKernels::swiglu_forward(float* out, const float* in, int N, int F) { queue_swiglu_forward(ctx_, out, in, N, F); }

void CudaLayerKernels::swiglu_backward(float* din, const float* in, const float* dout, int N, int F) {
  queue_swiglu_backward(ctx_, din, in, dout, N, F);
}

void CudaBf16LayerKernels::rmsnorm_forward(Bf16* out, float* rstd, const Bf16* in, const Bf16* weight, int N, int C, double eps) {
  queue_rmsnorm_forward<Bf16>(ctx_, out, rstd, nullptr, in, nullptr, weight, N, C, eps);
}

void CudaBf16LayerKernels::residual_rmsnorm_forward(Bf16* res, Bf16* out, float* rstd, const Bf16* a, const Bf16* b, const Bf16* weight,
                                     int N, int C, double eps) {
  queue_rmsnorm_forward(ctx_, out, rstd, res, a, b, weight, N, C, eps);
}

void CudaBf16LayerKernels::rmsnorm_backward(Bf16* din, float* dweight, const Bf16* dout, const Bf16* in, const Bf16* weight,
                             const float* rstd, int N, int C) {
  queue_rmsnorm_backward(ctx_, din, dweight, dout, in, weight, rstd, N, C);
}

void CudaBf16LayerKernels::rope(Bf16* x, const float* cosines, const float* sines, int B, int T, int first, int W, int heads, int hs,
                 bool inverse) {
  queue_rope(ctx_, x, cosines, sines, B, T, first, W, heads, hs, inverse);
}

void CudaBf16LayerKernels::swiglu_forward(Bf16* out, const Bf16* in, int N, int F) { queue_swiglu_forward(ctx_, out, in, N, F); }

void CudaBf16LayerKernels::swiglu_backward(Bf16* din, const Bf16* in, const Bf16* dout, int N, int F) {
  queue_swiglu_backward(ctx_, din, in, dout, N, F);
}

}  // namespace st
