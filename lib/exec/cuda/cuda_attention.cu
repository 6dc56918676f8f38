// Causal self-attention on the device: the matmuls as cuBLAS strided-batched GEMMs, the causal
// softmax and its backward as warp-per-row kernels. Same layout and results as the host
// (exec/host_kernels.cpp): qkv[B, T, W] holds q (NH heads of hs = C / NH channels), then k and v
// (NKV heads each), W = C + 2 NKV hs; query head h attends with key/value head h / (NH / NKV)
// (NKV = NH: GPT-2's multi-head attention, W = 3C). Kept probabilities are att[B, NH, T, T],
// zero above the diagonal (exec/attention_probs.hpp).
//
// Grouped-query attention without copying K and V per query head: query head h = g G + j
// (G = NH / NKV query heads per group g) is the j-th of its group, so for each j one batched
// matmul runs over the NKV groups, with the key/value heads at stride hs and the query heads and
// probability blocks at stride G. In backward the G products of a group add into its dK and dV in
// order j = 0, 1, ... (the first overwrites): a fixed order, no atomics. G = 1 is one batched
// matmul over all heads.
//
// That is the exact path, which fp32 runs keep (and bf16 runs with parallel.attention =
// "exact", or head widths flash attention has no kernel for). Where attention_uses_flash says
// so, training's forward and backward are flash attention's instead (flash_attention.hpp):
// nothing T x T in memory, the log-sum-exp of each row kept in AttentionProbs::lse. With bf16
// storage (CudaBf16LayerKernels) training's attention is always flash attention, and decoding's
// kernel (attention_rows) is a template on the storage type (storage.cuh).
#include <cmath>
#include <string>

#include "core/error.hpp"

#include "exec/cuda/cuda_bf16_layer_kernels.hpp"
#include "exec/cuda/cuda_checks.hpp"
#include "exec/cuda/cuda_gemm.hpp"
#include "exec/cuda/cuda_layer_kernels.hpp"
#include "exec/cuda/device_reduce.cuh"
#include "exec/cuda/flash_attention.hpp"
#include "exec/cuda/storage.cuh"

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
// The key/value head is h / (NH / NKV); cache rows are W = C + 2 NKV hs wide.
template <class S>
__global__ void attention_rows_kernel(S* out, const S* qkv, int first, int C, int NH, int NKV, float scale) {
  extern __shared__ float scores[];
  __shared__ float reduce_space[kWarp];
  const int i = blockIdx.x, h = blockIdx.y, t = first + i;
  const int hs = C / NH, W = C + 2 * NKV * hs, kv = (h / (NH / NKV)) * hs;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  const S* q = qkv + static_cast<std::size_t>(t) * W + h * hs;
  for (int j = warp; j <= t; j += warps) {
    const S* k = qkv + static_cast<std::size_t>(j) * W + C + kv;
    float dot = 0;
    for (int d = lane; d < hs; d += kWarp) dot += load(q[d]) * load(k[d]);
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
  S* o = out + static_cast<std::size_t>(i) * C + h * hs;
  for (int d = threadIdx.x; d < hs; d += blockDim.x) {
    const S* v = qkv + C + NKV * hs + kv + d;
    float acc = 0;
    for (int j = 0; j <= t; ++j) acc += scores[j] * load(v[static_cast<std::size_t>(j) * W]);
    o[d] = stored<S>(acc * inv);
  }
}

unsigned warp_rows_grid(int rows) {
  const int rows_per_block = kBlock / kWarp;
  return static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
}

// One sequence's attention geometry: head width, qkv's row width W, the softmax scale
// 1/sqrt(hs), the elements of one T x T probability block, the query heads per key/value head
// G, and where k and v start in a row (C and C + NKV hs).
struct HeadGeometry {
  int hs, W;
  float scale;
  long long tt;
  int group, k_at, v_at;
};
HeadGeometry head_geometry(int T, int C, int NH, int NKV) {
  const int hs = C / NH;
  return {hs, C + 2 * NKV * hs, 1.0f / std::sqrt(static_cast<float>(hs)), static_cast<long long>(T) * T, NH / NKV, C,
          C + NKV * hs};
}
}  // namespace

int CudaLayerKernels::attention_heads_at_once(int B, int NH) const {
  return st::attention_heads_at_once(true, B, NH, 0);
}

// In cuBLAS's column-major view a row-major [T, hs] slice of qkv with row stride W is an hs x T
// matrix with leading dimension W; att's [T, T] blocks are T x T transposed, ld T. Head h of
// sequence b: q at qkv + b*T*W + h*hs; its key/value head g = h / G: k at + k_at + g*hs, v at
// + v_at + g*hs. One sequence's heads go through each batched matmul (G of them, each over the
// NKV groups): kept probabilities at (b*NH + h)*T*T, or not kept, the NH blocks of the working
// set (reused by the next sequence, in stream order).
namespace {
// S^T = K Q^T * scale  (so S[t, s] = <q_t, k_s> * scale, row-major), then the causal softmax.
void head_probabilities(cublasHandle_t cublas, bool bf16, cudaStream_t stream, float* a, const float* q, int T,
                        const HeadGeometry& g, int NH, int NKV) {
  const int G = g.group;
  for (int j = 0; j < G; ++j)
    cuda_gemm_strided_batched(cublas, bf16, CUBLAS_OP_T, CUBLAS_OP_N, T, T, g.hs, g.scale, q + g.k_at, g.W, g.hs,
                              q + j * g.hs, g.W, static_cast<long long>(G) * g.hs, 0.0f, a + j * g.tt, T, G * g.tt,
                              NKV);
  const int rows = NH * T;
  causal_softmax_forward_kernel<<<warp_rows_grid(rows), kBlock, 0, stream>>>(a, rows, T);
  ST_CHECK_LAUNCH();
}
}  // namespace

void CudaLayerKernels::attention_forward(float* out, const AttentionProbs<float>& probs, const float* qkv, int B, int T,
                                         int C, int NH, int NKV) {
  ctx_.use_device();
  if (B == 0 || T == 0) return;
  if (attention_uses_flash(C / NH)) {
    ST_REQUIRE(probs.lse, "flash attention's forward needs AttentionProbs::lse");
    return flash_attention_forward(out, probs.lse, qkv, FlashShape{B, T, C, NH, NKV}, ctx_.stream);
  }
  const HeadGeometry g = head_geometry(T, C, NH, NKV);
  const int G = g.group;
  for (int b = 0; b < B; ++b) {
    const float* q = qkv + static_cast<std::size_t>(b) * T * g.W;
    float* a = probs.kept ? probs.kept + static_cast<std::size_t>(b) * NH * g.tt : probs.working;
    head_probabilities(ctx_.cublas, bf16_, ctx_.stream, a, q, T, g, NH, NKV);
    // out^T = V^T P^T  (out = P V)
    float* o = out + static_cast<std::size_t>(b) * T * C;
    for (int j = 0; j < G; ++j)
      cuda_gemm_strided_batched(ctx_.cublas, bf16_, CUBLAS_OP_N, CUBLAS_OP_N, g.hs, T, T, 1.0f, q + g.v_at, g.W, g.hs,
                                a + j * g.tt, T, G * g.tt, 0.0f, o + j * g.hs, C, static_cast<long long>(G) * g.hs,
                                NKV);
  }
}

namespace {
template <class S>
void queue_attention_rows(CudaKernelContext& k, S* out, const S* qkv, int first, int n, int C, int NH, int NKV) {
  k.use_device();
  if (n == 0) return;
  const std::size_t shared = static_cast<std::size_t>(first + n) * sizeof(float);
  // The scores and the kernel's static reduction space together above the default 48 KiB per
  // block (about 12250 positions): the kernel must ask for more; the device says how much it allows.
  const std::size_t with_static = shared + kWarp * sizeof(float);
  if (with_static > 48 * 1024) {
    int device_limit = 0;
    ST_CHECK_CUDA(cudaDeviceGetAttribute(&device_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, k.device));
    ST_REQUIRE(with_static <= static_cast<std::size_t>(device_limit),
               "decoding attention: " + std::to_string(first + n) + " positions need " + std::to_string(shared) +
                   " bytes of shared memory per block; this device allows " + std::to_string(device_limit));
    ST_CHECK_CUDA(cudaFuncSetAttribute(attention_rows_kernel<S>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(shared)));
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(C / NH));
  attention_rows_kernel<<<dim3(static_cast<unsigned>(n), static_cast<unsigned>(NH)), kBlock, shared, k.stream>>>(
      out, qkv, first, C, NH, NKV, scale);
  ST_CHECK_LAUNCH();
}
}  // namespace

void CudaLayerKernels::attention_rows(float* out, const float* qkv, int first, int n, int C, int NH, int NKV) {
  queue_attention_rows(ctx_, out, qkv, first, n, C, NH, NKV);
}

void CudaLayerKernels::attention_backward(float* dqkv, const AttentionProbs<float>& probs, const float* dout,
                                          const float* qkv, int B, int T, int C, int NH, int NKV) {
  ctx_.use_device();
  if (B == 0 || T == 0) return;
  if (attention_uses_flash(C / NH)) {
    ST_REQUIRE(probs.lse && probs.row_dots && probs.out,
               "flash attention's backward needs AttentionProbs::lse, row_dots and out");
    return flash_attention_backward(dqkv, probs.row_dots, dout, probs.out, probs.lse, qkv,
                                    FlashShape{B, T, C, NH, NKV}, ctx_.stream);
  }
  const HeadGeometry g = head_geometry(T, C, NH, NKV);
  const int G = g.group, hs = g.hs, W = g.W;
  const long long q_stride = static_cast<long long>(G) * hs, block_stride = G * g.tt;
  for (int b = 0; b < B; ++b) {
    const float* q = qkv + static_cast<std::size_t>(b) * T * W;
    const float* k = q + g.k_at;
    const float* v = q + g.v_at;
    const float* dO = dout + static_cast<std::size_t>(b) * T * C;
    float* dq = dqkv + static_cast<std::size_t>(b) * T * W;
    float* dk = dq + g.k_at;
    float* dv = dq + g.v_at;
    const float* a = probs.kept ? probs.kept + static_cast<std::size_t>(b) * NH * g.tt : probs.working;
    if (!probs.kept) head_probabilities(ctx_.cublas, bf16_, ctx_.stream, probs.working, q, T, g, NH, NKV);
    float* dP = probs.dworking;
    for (int j = 0; j < G; ++j) {
      const float beta = j == 0 ? 0.0f : 1.0f;  // the group's first query head sets dV, the others add
      // dP = dO V^T
      cuda_gemm_strided_batched(ctx_.cublas, bf16_, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v, W, hs, dO + j * hs, C,
                                q_stride, 0.0f, dP + j * g.tt, T, block_stride, NKV);
      // dV += P^T dO  (dV^T += dO^T P)
      cuda_gemm_strided_batched(ctx_.cublas, bf16_, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, dO + j * hs, C, q_stride,
                                a + j * g.tt, T, block_stride, beta, dv, W, hs, NKV);
    }
    const int rows = NH * T;
    causal_softmax_backward_kernel<<<warp_rows_grid(rows), kBlock, 0, ctx_.stream>>>(dP, a, rows, T);
    ST_CHECK_LAUNCH();
    for (int j = 0; j < G; ++j) {
      const float beta = j == 0 ? 0.0f : 1.0f;  // likewise for dK
      // dQ = dS K * scale  (dQ^T = K^T dS^T)
      cuda_gemm_strided_batched(ctx_.cublas, bf16_, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, g.scale, k, W, hs, dP + j * g.tt,
                                T, block_stride, 0.0f, dq + j * hs, W, q_stride, NKV);
      // dK += dS^T Q * scale  (dK^T += Q^T dS)
      cuda_gemm_strided_batched(ctx_.cublas, bf16_, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, g.scale, q + j * hs, W, q_stride,
                                dP + j * g.tt, T, block_stride, beta, dk, W, hs, NKV);
    }
  }
}

// ---- bf16 storage: flash attention, or nothing ----

int CudaBf16LayerKernels::attention_heads_at_once(int B, int NH) const {
  return st::attention_heads_at_once(true, B, NH, 0);
}

namespace {
// bf16 storage has no exact path: the trainer refuses other head widths before it allocates
// (sharded_model.cpp); a caller that gets here anyway is told why.
void require_flash(const CudaBf16LayerKernels& kernels, int head_dim) {
  ST_REQUIRE(kernels.attention_uses_flash(head_dim),
             "bf16 activations on a GPU run attention as flash attention, which has no kernel for heads " +
                 std::to_string(head_dim) + " wide (32, 64 and 128 do)");
}
}  // namespace

void CudaBf16LayerKernels::attention_forward(Bf16* out, const AttentionProbs<float, Bf16>& probs, const Bf16* qkv,
                                             int B, int T, int C, int NH, int NKV) {
  ctx_.use_device();
  if (B == 0 || T == 0) return;
  require_flash(*this, C / NH);
  ST_REQUIRE(probs.lse, "flash attention's forward needs AttentionProbs::lse");
  flash_attention_forward(out, probs.lse, qkv, FlashShape{B, T, C, NH, NKV}, ctx_.stream);
}

void CudaBf16LayerKernels::attention_backward(Bf16* dqkv, const AttentionProbs<float, Bf16>& probs, const Bf16* dout,
                                              const Bf16* qkv, int B, int T, int C, int NH, int NKV) {
  ctx_.use_device();
  if (B == 0 || T == 0) return;
  require_flash(*this, C / NH);
  ST_REQUIRE(probs.lse && probs.row_dots && probs.out,
             "flash attention's backward needs AttentionProbs::lse, row_dots and out");
  flash_attention_backward(dqkv, probs.row_dots, dout, probs.out, probs.lse, qkv, FlashShape{B, T, C, NH, NKV},
                           ctx_.stream);
}

void CudaBf16LayerKernels::attention_rows(Bf16* out, const Bf16* qkv, int first, int n, int C, int NH, int NKV) {
  queue_attention_rows(ctx_, out, qkv, first, n, C, NH, NKV);
}

}  // namespace st
