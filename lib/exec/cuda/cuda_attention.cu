// Causal multi-head self-attention on the device: the matmuls as cuBLAS strided-batched GEMMs
// (one batch of heads per sequence of the micro-batch), the causal softmax and its backward as
// warp-per-row kernels. Same layout and results as the host (exec/host_kernels.cpp):
// qkv[B, T, 3C] holds q, k, v side by side, heads of hs = C / NH channels; kept probabilities
// are att[B, NH, T, T], zero above the diagonal (exec/attention_probs.hpp).
#include <cmath>

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
