// Causal multi-head self-attention on the device: the matmuls as cuBLAS strided-batched GEMMs
// (one batch of heads per sequence of the micro-batch), the causal softmax and its backward as
// warp-per-row kernels. Same layout and results as the host (exec/host_kernels.cpp):
// qkv[B, T, 3C] holds q, k, v side by side, heads of hs = C / NH channels; kept probabilities
// are att[B, NH, T, T], zero above the diagonal (exec/attention_probs.hpp).
#include <cmath>
#include <string>

#include "core/error.hpp"

#include "exec/cuda/cuda_checks.hpp"
#include "exec/cuda/cuda_gemm.hpp"
#include "exec/cuda/cuda_layer_kernels.hpp"
#include "exec/cuda/device_reduce.cuh"

namespace st {
namespace {

using namespace cuda_detail;

// Causal softmax in place, one warp per row of `rows` rows of length T (row r is query
// t = r mod T): the scores s[0..t] (already scaled) become probabilities, the rest 0.
__global__ void causal_softmax_forward_kernel(float* att, int rows, int T) {
  const int r = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (r >= rows) return;  // the whole warp leaves together
  const int t = r % T;
  float* a = att + static_cast<std::size_t>(r) * T;
  float max = -INFINITY;
  for (int j = lane; j <= t; j += kWarp) max = fmaxf(max, a[j]);
  max = warp_reduce(max, Max{});
  float sum = 0;
  for (int j = lane; j <= t; j += kWarp) sum += expf(a[j] - max);
  const float inv = 1.0f / warp_reduce(sum, Sum{});
  for (int j = lane; j < T; j += kWarp) a[j] = j <= t ? expf(a[j] - max) * inv : 0.0f;
}

// Softmax backward in place, one warp per row: dP (in d) becomes dS = P * (dP - <P, dP>) on
// the causal part, 0 above it.
__global__ void causal_softmax_backward_kernel(float* d, const float* att, int rows, int T) {
  const int r = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (r >= rows) return;
  const int t = r % T;
  const float* p = att + static_cast<std::size_t>(r) * T;
  float* g = d + static_cast<std::size_t>(r) * T;
  float dot = 0;
  for (int j = lane; j <= t; j += kWarp) dot += p[j] * g[j];
  dot = warp_reduce(dot, Sum{});
  for (int j = lane; j < T; j += kWarp) g[j] = j <= t ? p[j] * (g[j] - dot) : 0.0f;
}

// Incremental decoding, one block per (query row i, head h): query position t = first + i
// attends keys 0..t of the cache qkv. The scores sit in dynamic shared memory (t + 1 floats);
// each warp takes keys in turn, its lanes splitting the head's dot product; then the block's
// max and sum; then the head's hs outputs, one per thread, each a sum over the keys in order.
__global__ void attention_rows_kernel(float* out, const float* qkv, int first, int C, int NH, float scale) {
  extern __shared__ float scores[];
  __shared__ float reduce_space[kWarp];
  const int i = blockIdx.x, h = blockIdx.y, t = first + i;
  const int hs = C / NH, C3 = 3 * C;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  const float* q = qkv + static_cast<std::size_t>(t) * C3 + h * hs;
  for (int j = warp; j <= t; j += warps) {
    const float* k = qkv + static_cast<std::size_t>(j) * C3 + C + h * hs;
    float dot = 0;
    for (int d = lane; d < hs; d += kWarp) dot += q[d] * k[d];
    dot = warp_reduce(dot, Sum{});
    if (lane == 0) scores[j] = dot * scale;
  }
  __syncthreads();
  float max = -INFINITY;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) max = fmaxf(max, scores[j]);
  max = block_reduce(max, Max{}, -INFINITY, reduce_space);
  float sum = 0;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) {
    const float e = expf(scores[j] - max);
    scores[j] = e;
    sum += e;
  }
  // block_reduce synchronises the block, so every exponential is in shared memory after it.
  sum = block_reduce(sum, Sum{}, 0.0f, reduce_space);
  const float inv = 1.0f / sum;
  float* o = out + static_cast<std::size_t>(i) * C + h * hs;
  for (int d = threadIdx.x; d < hs; d += blockDim.x) {
    const float* v = qkv + 2 * C + h * hs + d;
    float acc = 0;
    for (int j = 0; j <= t; ++j) acc += scores[j] * v[static_cast<std::size_t>(j) * C3];
    o[d] = acc * inv;
  }
}

unsigned warp_rows_grid(int rows) {
  const int rows_per_block = kBlock / kWarp;
  return static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
}

// Per head: its width, the row stride of qkv (3C), the softmax scale 1/sqrt(hs), and the
// elements of one T x T block of att.
struct HeadGeometry {
  int hs, C3;
  float scale;
  long long tt;
};
HeadGeometry head_geometry(int T, int C, int NH) {
  const int hs = C / NH;
  return {hs, 3 * C, 1.0f / std::sqrt(static_cast<float>(hs)), static_cast<long long>(T) * T};
}
}  // namespace

int CudaLayerKernels::attention_heads_at_once(int B, int NH) const {
  return st::attention_heads_at_once(true, B, NH, 0);
}

// In cuBLAS's column-major view a row-major [T, hs] slice of qkv with row stride 3C is an
// hs x T matrix with leading dimension 3C; att's [T, T] blocks are T x T transposed, ld T.
// Head h of sequence b: q at qkv + b*T*3C + h*hs (k at +C, v at +2C). One sequence's NH heads
// go through each batched matmul: kept probabilities at (b*NH + h)*T*T, or not kept, the NH
// blocks of the working set (reused by the next sequence, in stream order).
namespace {
// S^T = K Q^T * scale  (so S[t, s] = <q_t, k_s> * scale, row-major), then the causal softmax.
void head_probabilities(cublasHandle_t cublas, bool bf16, cudaStream_t stream, float* a, const float* q, int T, int C,
                        int NH) {
  const auto [hs, C3, scale, tt] = head_geometry(T, C, NH);
  cuda_gemm_strided_batched(cublas, bf16, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale, q + C, C3, hs, q, C3, hs, 0.0f, a,
                            T, tt, NH);
  const int rows = NH * T;
  causal_softmax_forward_kernel<<<warp_rows_grid(rows), kBlock, 0, stream>>>(a, rows, T);
  ST_CHECK_LAUNCH();
}
}  // namespace

void CudaLayerKernels::attention_forward(float* out, const AttentionProbs<float>& probs, const float* qkv, int B, int T,
                                         int C, int NH) {
  use_device();
  if (B == 0 || T == 0) return;
  const auto [hs, C3, scale, tt] = head_geometry(T, C, NH);
  for (int b = 0; b < B; ++b) {
    const float* q = qkv + static_cast<std::size_t>(b) * T * C3;
    float* a = probs.kept ? probs.kept + static_cast<std::size_t>(b) * NH * tt : probs.working;
    head_probabilities(cublas_, bf16_, stream_, a, q, T, C, NH);
    // out^T = V^T P^T  (out = P V)
    cuda_gemm_strided_batched(cublas_, bf16_, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, q + 2 * C, C3, hs, a, T, tt,
                              0.0f, out + static_cast<std::size_t>(b) * T * C, C, hs, NH);
  }
}

void CudaLayerKernels::attention_rows(float* out, const float* qkv, int first, int n, int C, int NH) {
  use_device();
  if (n == 0) return;
  const std::size_t shared = static_cast<std::size_t>(first + n) * sizeof(float);
  // The scores and the kernel's static reduction space together above the default 48 KiB per
  // block (about 12250 positions): the kernel must ask for more; the device says how much it allows.
  const std::size_t with_static = shared + kWarp * sizeof(float);
  if (with_static > 48 * 1024) {
    int device_limit = 0;
    ST_CHECK_CUDA(cudaDeviceGetAttribute(&device_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_));
    ST_REQUIRE(with_static <= static_cast<std::size_t>(device_limit),
               "decoding attention: " + std::to_string(first + n) + " positions need " + std::to_string(shared) +
                   " bytes of shared memory per block; this device allows " + std::to_string(device_limit));
    ST_CHECK_CUDA(cudaFuncSetAttribute(attention_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(shared)));
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(C / NH));
  attention_rows_kernel<<<dim3(static_cast<unsigned>(n), static_cast<unsigned>(NH)), kBlock, shared, stream_>>>(
      out, qkv, first, C, NH, scale);
  ST_CHECK_LAUNCH();
}

void CudaLayerKernels::attention_backward(float* dqkv, const AttentionProbs<float>& probs, const float* dout,
                                          const float* qkv, int B, int T, int C, int NH) {
  use_device();
  if (B == 0 || T == 0) return;
  const auto [hs, C3, scale, tt] = head_geometry(T, C, NH);
  for (int b = 0; b < B; ++b) {
    const float* q = qkv + static_cast<std::size_t>(b) * T * C3;
    const float* k = q + C;
    const float* v = q + 2 * C;
    const float* dO = dout + static_cast<std::size_t>(b) * T * C;
    float* dq = dqkv + static_cast<std::size_t>(b) * T * C3;
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    const float* a = probs.kept ? probs.kept + static_cast<std::size_t>(b) * NH * tt : probs.working;
    if (!probs.kept) head_probabilities(cublas_, bf16_, stream_, probs.working, q, T, C, NH);
    float* dP = probs.dworking;
    // dP = dO V^T
    cuda_gemm_strided_batched(cublas_, bf16_, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v, C3, hs, dO, C, hs, 0.0f, dP,
                              T, tt, NH);
    // dV = P^T dO  (dV^T = dO^T P)
    cuda_gemm_strided_batched(cublas_, bf16_, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, dO, C, hs, a, T, tt, 0.0f, dv,
                              C3, hs, NH);
    const int rows = NH * T;
    causal_softmax_backward_kernel<<<warp_rows_grid(rows), kBlock, 0, stream_>>>(dP, a, rows, T);
    ST_CHECK_LAUNCH();
    // dQ = dS K * scale  (dQ^T = K^T dS^T)
    cuda_gemm_strided_batched(cublas_, bf16_, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, scale, k, C3, hs, dP, T, tt, 0.0f, dq,
                              C3, hs, NH);
    // dK = dS^T Q * scale  (dK^T = Q^T dS)
    cuda_gemm_strided_batched(cublas_, bf16_, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, scale, q, C3, hs, dP, T, tt, 0.0f, dk,
                              C3, hs, NH);
  }
}

}  // namespace st
