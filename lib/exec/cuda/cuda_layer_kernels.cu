// CudaLayerKernels and CudaBf16LayerKernels: the encoder, LayerNorm, linear layers, GELU, residual
// add and the softmax cross-entropy (whole, or over a tensor-parallel rank's slice of the
// vocabulary) on one device (attention is in cuda_attention.cu). The kernels are templates on the
// storage type (storage.cuh): fp32's are unchanged by it, bf16's read bf16 and round what they
// store once; both are queued through the shared CudaKernelContext. Each kernel matches the host
// kernel of the same name in exec/host_kernels.cpp: which outputs it overwrites and which it adds
// to, the padded vocabulary, the order of operations where it is cheap to keep.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "exec/cuda/cuda_bf16_layer_kernels.hpp"
#include "exec/cuda/cuda_checks.hpp"
#include "exec/cuda/cuda_gemm.hpp"
#include "exec/cuda/cuda_layer_kernels.hpp"
#include "exec/cuda/device_reduce.cuh"
#include "exec/cuda/row_ops.cuh"
#include "exec/cuda/storage.cuh"

namespace st {
namespace {

using namespace cuda_detail;

constexpr float kLayerNormEps = 1e-5f;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

#define ST_GRID_STRIDE(i, n) \
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < (n); i += std::size_t{gridDim.x} * blockDim.x)

// out[n, c] = wte[tokens[n], c] + wpe[n % T, c] for the N = B*T rows; without wpe (null: no
// learned positions, llama) the lookup alone. A negative token is a row this rank's table does
// not hold (another tensor-parallel rank's slice of the vocabulary): the position row alone, or
// zeros without wpe, as the host writes it.
template <class S>
__global__ void encoder_forward_kernel(S* out, const int* tokens, const S* wte, const S* wpe, int N, int T, int C) {
  ST_GRID_STRIDE(i, std::size_t{1} * N * C) {
    const std::size_t row = i / C, c = i % C;
    const int token = tokens[row];
    const float position = wpe ? load(wpe[(row % T) * C + c]) : 0.0f;
    if (token < 0) {
      out[i] = stored<S>(position);
      continue;
    }
    const float embedding = load(wte[static_cast<std::size_t>(token) * C + c]);
    out[i] = stored<S>(wpe ? embedding + position : embedding);
  }
}

// dwpe[t, c] += sum over b of dout[b, t, c], b in increasing order. One thread per (t, c).
template <class S>
__global__ void encoder_backward_wpe_kernel(float* dwpe, const S* dout, int B, int T, int C) {
  ST_GRID_STRIDE(i, std::size_t{1} * T * C) {
    float sum = 0;
    for (int b = 0; b < B; ++b) sum += load(dout[static_cast<std::size_t>(b) * T * C + i]);
    dwpe[i] += sum;
  }
}

// values[i] = i: the positions the encoder's sort carries along with the tokens.
__global__ void iota_kernel(int* values, int n) {
  ST_GRID_STRIDE(i, static_cast<std::size_t>(n)) values[i] = static_cast<int>(i);
}

// dwte without atomics: positions sorted stably by token (`sorted_tokens`, `positions`), so
// the positions of each token form a run in increasing order. The thread of the run's first
// entry and channel c owns dwte[token, c]: it sums the run's dout rows in order, then adds once.
// One thread per (sorted entry, channel); threads not at the start of a run return at once.
// Negative tokens (rows another rank holds; the signed sort puts them first) have no row here:
// their threads return at once too, their gradient went to dwpe alone.
template <class S>
__global__ void encoder_backward_wte_kernel(float* dwte, const S* dout, const int* sorted_tokens,
                                            const int* positions, int N, int C) {
  ST_GRID_STRIDE(i, std::size_t{1} * N * C) {
    const int first = static_cast<int>(i / C);
    const std::size_t c = i % C;
    const int token = sorted_tokens[first];
    if (token < 0) continue;
    if (first > 0 && sorted_tokens[first - 1] == token) continue;
    float sum = 0;
    for (int k = first; k < N && sorted_tokens[k] == token; ++k) sum += load(dout[static_cast<std::size_t>(positions[k]) * C + c]);
    dwte[static_cast<std::size_t>(token) * C + c] += sum;
  }
}

// LayerNorm forward, one warp per row (any C); keeps mean and 1/std per row. With `b` (not
// null) the row normalised is in + b, which is written to `res` first (a residual add fused with
// the norm after it: the sum is stored once and read back from the lane's own writes, as stored:
// rounded, in bf16 storage).
template <class S>
__global__ void layernorm_forward_kernel(S* out, float* mean, float* rstd, S* res, const S* in, const S* b,
                                         const S* weight, const S* bias, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= N) return;  // the whole warp leaves together
  const std::size_t offset = static_cast<std::size_t>(row) * C;
  const S* x = in + offset;
  float sum = 0;
  if (b) {
    S* r = res + offset;
    for (int c = lane; c < C; c += kWarp) {
      r[c] = stored<S>(load(x[c]) + load(b[offset + c]));
      sum += load(r[c]);
    }
    x = r;
  } else {
    for (int c = lane; c < C; c += kWarp) sum += load(x[c]);
  }
  const float m = warp_reduce(sum, Sum{}) / C;
  float var = 0;
  for (int c = lane; c < C; c += kWarp) var += (load(x[c]) - m) * (load(x[c]) - m);
  const float s = 1.0f / sqrtf(warp_reduce(var, Sum{}) / C + kLayerNormEps);
  S* o = out + offset;
  for (int c = lane; c < C; c += kWarp) o[c] = stored<S>((load(x[c]) - m) * s * load(weight[c]) + load(bias[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// LayerNorm backward in one pass over a chunk of kRowsPerChunk rows (blockIdx.x), the whole
// block on the chunk: din += s (dout w - a - xhat b) and the chunk's partial sums of dout xhat
// (partial_w) and dout (partial_b) per column, for add_partials. First each warp takes rows of the
// chunk for their two dot products (a and b, kept in shared memory); then each thread takes
// columns and walks the chunk's rows in order, so the partial sums add in row order (the same
// order, hence the same bits, on every run) and the second read of dout and in may come from the
// cache. din never aliases dout or in (the models pass distinct buffers): restrict lets the loads
// of the next row go ahead of this row's store. In bf16 storage din's sum is rounded once.
template <class S>
__global__ void layernorm_backward_kernel(S* __restrict__ din, float* __restrict__ partial_w,
                                          float* __restrict__ partial_b, const S* __restrict__ dout,
                                          const S* __restrict__ in, const S* __restrict__ weight,
                                          const float* __restrict__ mean, const float* __restrict__ rstd, int N, int C) {
  __shared__ float row_a[kRowsPerChunk], row_b[kRowsPerChunk];
  const int begin = blockIdx.x * kRowsPerChunk, rows = min(N - begin, kRowsPerChunk);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  for (int k = warp; k < rows; k += warps) {
    const int row = begin + k;
    const std::size_t offset = static_cast<std::size_t>(row) * C;
    const float m = mean[row], s = rstd[row];
    float dnorm_sum = 0, dnorm_xhat_sum = 0;
    for (int c = lane; c < C; c += kWarp) {
      const float dnorm = load(dout[offset + c]) * load(weight[c]);
      dnorm_sum += dnorm;
      dnorm_xhat_sum += dnorm * ((load(in[offset + c]) - m) * s);
    }
    const float a = warp_reduce(dnorm_sum, Sum{}) / C, b = warp_reduce(dnorm_xhat_sum, Sum{}) / C;
    if (lane == 0) {
      row_a[k] = a;
      row_b[k] = b;
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float w = load(weight[c]);
    float sw = 0, sb = 0;
    for (int k = 0; k < rows; ++k) {
      const int row = begin + k;
      const std::size_t i = static_cast<std::size_t>(row) * C + c;
      const float s = rstd[row], xhat = (load(in[i]) - mean[row]) * s, d = load(dout[i]);
      din[i] = stored<S>(load(din[i]) + s * (d * w - row_a[k] - xhat * row_b[k]));
      sw += d * xhat;
      sb += d;
    }
    partial_w[static_cast<std::size_t>(blockIdx.x) * C + c] = sw;
    partial_b[static_cast<std::size_t>(blockIdx.x) * C + c] = sb;
  }
}

// Per chunk of kRowsPerChunk rows (blockIdx.y) and column: the column sum of src.
template <class S>
__global__ void column_partials_kernel(float* partials, const S* src, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int begin = blockIdx.y * kRowsPerChunk, end = min(N, begin + kRowsPerChunk);
  float sum = 0;
  for (int row = begin; row < end; ++row) sum += load(src[static_cast<std::size_t>(row) * C + c]);
  partials[static_cast<std::size_t>(blockIdx.y) * C + c] = sum;
}

// GELU, tanh approximation (GPT-2's).
template <class S>
__global__ void gelu_forward_kernel(S* out, const S* in, std::size_t n) {
  ST_GRID_STRIDE(i, n) {
    const float x = load(in[i]);
    out[i] = stored<S>(0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCubic * x * x * x))));
  }
}

// din = dout * gelu'(in) (overwrites din).
template <class S>
__global__ void gelu_backward_kernel(S* din, const S* in, const S* dout, std::size_t n) {
  ST_GRID_STRIDE(i, n) {
    const float x = load(in[i]);
    const float th = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    din[i] = stored<S>(load(dout[i]) * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du));
  }
}

// out = a + b (the residual stream).
template <class S>
__global__ void add_kernel(S* out, const S* a, const S* b, std::size_t n) {
  ST_GRID_STRIDE(i, n) out[i] = stored<S>(load(a[i]) + load(b[i]));
}

// Softmax over the first V of Vp logits, in place, one block per row; padded columns become 0.
// With targets, the row's loss -log p[target] goes to losses (float) and row_losses (double).
template <class S>
__global__ void softmax_cross_entropy_forward_kernel(S* logits, float* losses, double* row_losses, const int* targets,
                                                     int V, int Vp) {
  __shared__ float shared[kWarp];
  const int row = blockIdx.x;
  S* x = logits + static_cast<std::size_t>(row) * Vp;
  float max = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) max = fmaxf(max, load(x[j]));
  max = block_reduce(max, Max{}, -INFINITY, shared);
  // Read before the row is overwritten; p[target] is then the same expression as in the row.
  const float target_logit = targets && threadIdx.x == 0 ? load(x[targets[row]]) : 0.0f;
  float sum = 0;
  for (int j = threadIdx.x; j < V; j += blockDim.x) sum += expf(load(x[j]) - max);
  sum = block_reduce(sum, Sum{}, 0.0f, shared);  // its barriers also order the reads above before the writes
  const float inv = 1.0f / sum;
  for (int j = threadIdx.x; j < Vp; j += blockDim.x) x[j] = stored<S>(j < V ? expf(load(x[j]) - max) * inv : 0.0f);
  if (targets && threadIdx.x == 0) {
    const float p = expf(target_logit - max) * inv;
    const double loss = -log(fmax(static_cast<double>(p), 1e-300));
    losses[row] = static_cast<float>(loss);
    row_losses[row] = loss;
  }
}


// One slice of a vocabulary split across tensor-parallel ranks (exec/host_kernels.hpp
// logit_slice_*): Vp columns, the first V real, column j being token first + j.

// Per row, one block: stats[3 row] = the slice's max, stats[3 row + 1] = the sum of e^(x - max)
// over it, stats[3 row + 2] = the target's logit where the slice holds it, else 0. A slice with no
// real columns gives -inf, 0, 0 (the combine skips it).
template <class S>
__global__ void logit_slice_stats_kernel(const S* logits, const int* targets, float* stats, int V, int Vp, int first) {
  __shared__ float shared[kWarp];
  const int row = blockIdx.x;
  const S* x = logits + static_cast<std::size_t>(row) * Vp;
  float max = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) max = fmaxf(max, load(x[j]));
  max = block_reduce(max, Max{}, -INFINITY, shared);
  float sum = 0;
  for (int j = threadIdx.x; j < V; j += blockDim.x) sum += expf(load(x[j]) - max);
  sum = block_reduce(sum, Sum{}, 0.0f, shared);
  if (threadIdx.x == 0) {
    const int local = targets ? targets[row] - first : -1;
    float* out = stats + 3 * static_cast<std::size_t>(row);
    out[0] = max;
    out[1] = sum;
    out[2] = local >= 0 && local < V ? load(x[local]) : 0.0f;
  }
}

// One thread per row: the `parts` slices' stats (gathered[part, row, 3]) combined in part order,
// in double as the host does: row_stats[2 row] = the overall max, row_stats[2 row + 1] = the sum
// of e^(x - max) over the whole vocabulary; with targets the row's loss log sum + max - target
// logit to losses (float) and row_losses (double, for the fixed-order total).
__global__ void logit_slices_combine_kernel(const float* gathered, float* row_stats, float* losses, double* row_losses,
                                            const int* targets, int N, int parts) {
  const std::size_t stride = 3 * static_cast<std::size_t>(N);
  ST_GRID_STRIDE(i, static_cast<std::size_t>(N)) {
    float max = -INFINITY;
    for (int p = 0; p < parts; ++p) max = fmaxf(max, gathered[p * stride + 3 * i]);
    double sum = 0, target_logit = 0;
    for (int p = 0; p < parts; ++p) {
      const float* s = gathered + p * stride + 3 * i;
      // A slice without real columns has sum 0 and max -inf: skipped, not 0 * e^-inf.
      if (s[1] > 0) sum += static_cast<double>(s[1]) * exp(static_cast<double>(s[0]) - max);
      target_logit += s[2];  // one slice holds the target; the others add 0
    }
    row_stats[2 * i] = max;
    row_stats[2 * i + 1] = static_cast<float>(sum);
    if (targets) {
      const double loss = log(sum) + static_cast<double>(max) - target_logit;
      losses[i] = static_cast<float>(loss);
      row_losses[i] = loss;
    }
  }
}

// The slice's probabilities in place from the combined row stats, one block per row; padded
// columns become 0.
template <class S>
__global__ void logit_slice_softmax_kernel(S* logits, const float* row_stats, int V, int Vp) {
  const int row = blockIdx.x;
  S* x = logits + static_cast<std::size_t>(row) * Vp;
  const float max = row_stats[2 * row];
  const float inv = static_cast<float>(1.0 / static_cast<double>(row_stats[2 * row + 1]));
  for (int j = threadIdx.x; j < Vp; j += blockDim.x) x[j] = stored<S>(j < V ? expf(load(x[j]) - max) * inv : 0.0f);
}

// probs -> dlogits in place over a slice of the vocabulary starting at token `first`:
// (p - onehot(target)) * scale, the target's 1 only where the slice holds it; padded columns 0.
template <class S>
__global__ void logit_slice_backward_kernel(S* probs, const int* targets, int N, int V, int Vp, int first, float scale) {
  ST_GRID_STRIDE(i, std::size_t{1} * N * Vp) {
    const std::size_t row = i / Vp;
    const int j = static_cast<int>(i % Vp);
    float d = 0.0f;
    if (j < V) {
      d = load(probs[i]) * scale;
      if (j == targets[row] - first) d -= scale;
    }
    probs[i] = stored<S>(d);
  }
}

unsigned rows_grid(int rows_count, int rows_per_block) {
  return static_cast<unsigned>((rows_count + rows_per_block - 1) / rows_per_block);
}

// ---- queued through the context, for either storage type ----

template <class S>
void queue_encoder_forward(CudaKernelContext& k, S* out, const int* tokens, const S* wte, const S* wpe, int B, int T,
                           int C) {
  k.use_device();
  const std::size_t n = std::size_t{1} * B * T * C;
  if (n == 0) return;
  encoder_forward_kernel<<<grid_for(n), kBlock, 0, k.stream>>>(out, tokens, wte, wpe, B * T, T, C);
  ST_CHECK_LAUNCH();
}

template <class S>
void queue_encoder_backward(CudaKernelContext& k, float* dwte, float* dwpe, const S* dout, const int* tokens, int B,
                            int T, int C) {
  k.use_device();
  const int N = B * T;
  if (N == 0 || C == 0) return;
  if (dwpe) {  // null: the model has no position table
    encoder_backward_wpe_kernel<<<grid_for(std::size_t{1} * T * C), kBlock, 0, k.stream>>>(dwpe, dout, B, T, C);
    ST_CHECK_LAUNCH();
  }
  int* keys = k.sort_keys.get<int>(N, k.stream);
  int* values = k.sort_values.get<int>(2 * std::size_t{1} * N, k.stream);  // positions in, sorted positions out
  iota_kernel<<<grid_for(N), kBlock, 0, k.stream>>>(values, N);
  ST_CHECK_LAUNCH();
  std::size_t temp_bytes = 0;
  ST_CHECK_CUDA(
      cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, tokens, keys, values, values + N, N, 0, 32, k.stream));
  void* temp = k.sort_temp.get(std::max<std::size_t>(temp_bytes, 1), k.stream);  // null would mean: size query
  ST_CHECK_CUDA(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, keys, values, values + N, N, 0, 32, k.stream));
  encoder_backward_wte_kernel<<<grid_for(std::size_t{1} * N * C), kBlock, 0, k.stream>>>(dwte, dout, keys, values + N,
                                                                                         N, C);
  ST_CHECK_LAUNCH();
}

// layernorm_forward, and with `b` the residual add before it (res = in + b).
template <class S>
void queue_layernorm_forward(CudaKernelContext& k, S* out, float* mean, float* rstd, S* res, const S* in, const S* b,
                             const S* weight, const S* bias, int N, int C) {
  k.use_device();
  if (N == 0) return;
  const int rows_per_block = kBlock / kWarp;
  layernorm_forward_kernel<<<rows_grid(N, rows_per_block), kBlock, 0, k.stream>>>(out, mean, rstd, res, in, b, weight,
                                                                                   bias, N, C);
  ST_CHECK_LAUNCH();
}

template <class S>
void queue_layernorm_backward(CudaKernelContext& k, S* din, float* dweight, float* dbias, const S* dout, const S* in,
                              const S* weight, const float* mean, const float* rstd, int N, int C) {
  k.use_device();
  if (N == 0 || C == 0) return;
  const int chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  float* partial_w = k.partials.get<float>(2 * static_cast<std::size_t>(chunks) * C, k.stream);
  float* partial_b = partial_w + static_cast<std::size_t>(chunks) * C;
  layernorm_backward_kernel<<<static_cast<unsigned>(chunks), kBlock, 0, k.stream>>>(din, partial_w, partial_b, dout,
                                                                                    in, weight, mean, rstd, N, C);
  ST_CHECK_LAUNCH();
  add_partials(dweight, partial_w, chunks, C, k.stream);
  ST_CHECK_LAUNCH();
  add_partials(dbias, partial_b, chunks, C, k.stream);
  ST_CHECK_LAUNCH();
}

// dst[c] += sum over the N rows of src[row, c] (row-major, C columns), in a fixed order.
template <class S>
void add_column_sums(CudaKernelContext& k, float* dst, const S* src, int N, int C) {
  float* partials = k.bias_partials(dst != nullptr, N, C);
  if (!partials) return;
  const dim3 grid(rows_grid(C, kBlock), static_cast<unsigned>((N + kRowsPerChunk - 1) / kRowsPerChunk));
  column_partials_kernel<<<grid, kBlock, 0, k.stream>>>(partials, src, N, C);
  ST_CHECK_LAUNCH();
  k.add_bias_partials(dst, partials, N, C);
}

template <class S>
void queue_gelu_forward(CudaKernelContext& k, S* out, const S* in, std::size_t n) {
  k.use_device();
  if (n == 0) return;
  gelu_forward_kernel<<<grid_for(n), kBlock, 0, k.stream>>>(out, in, n);
  ST_CHECK_LAUNCH();
}

template <class S>
void queue_gelu_backward(CudaKernelContext& k, S* din, const S* in, const S* dout, std::size_t n) {
  k.use_device();
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n), kBlock, 0, k.stream>>>(din, in, dout, n);
  ST_CHECK_LAUNCH();
}

template <class S>
void queue_add(CudaKernelContext& k, S* out, const S* a, const S* b, std::size_t n) {
  k.use_device();
  if (n == 0) return;
  add_kernel<<<grid_for(n), kBlock, 0, k.stream>>>(out, a, b, n);
  ST_CHECK_LAUNCH();
}

template <class S>
void queue_softmax_cross_entropy_forward(CudaKernelContext& k, S* logits_to_probs, float* losses, const int* targets,
                                         int N, int V, int Vp, LossSum loss) {
  k.use_device();
  if (N == 0) return;
  double* row_losses = targets ? k.row_losses.get<double>(static_cast<std::size_t>(N), k.stream) : nullptr;
  softmax_cross_entropy_forward_kernel<<<static_cast<unsigned>(N), kBlock, 0, k.stream>>>(logits_to_probs, losses,
                                                                                           row_losses, targets, V, Vp);
  ST_CHECK_LAUNCH();
  if (targets) k.add_row_losses(row_losses, N, loss);
}

template <class S>
void queue_logit_slice_backward(CudaKernelContext& k, S* probs_to_dlogits, const int* targets, int N, int V, int Vp,
                                int first, float scale) {
  k.use_device();
  const std::size_t n = std::size_t{1} * N * Vp;
  if (n == 0) return;
  logit_slice_backward_kernel<<<grid_for(n), kBlock, 0, k.stream>>>(probs_to_dlogits, targets, N, V, Vp, first,
                                                                    scale);
  ST_CHECK_LAUNCH();
}

template <class S>
void queue_logit_slice_stats(CudaKernelContext& k, const S* logits, const int* targets, float* stats, int N, int V,
                             int Vp, int first) {
  k.use_device();
  if (N == 0) return;
  logit_slice_stats_kernel<<<static_cast<unsigned>(N), kBlock, 0, k.stream>>>(logits, targets, stats, V, Vp, first);
  ST_CHECK_LAUNCH();
}

void queue_logit_slices_combine(CudaKernelContext& k, const float* gathered, float* row_stats, float* losses,
                                const int* targets, int N, int parts, LossSum loss) {
  k.use_device();
  if (N == 0) return;
  double* row_losses = targets ? k.row_losses.get<double>(static_cast<std::size_t>(N), k.stream) : nullptr;
  logit_slices_combine_kernel<<<grid_for(static_cast<std::size_t>(N)), kBlock, 0, k.stream>>>(
      gathered, row_stats, losses, row_losses, targets, N, parts);
  ST_CHECK_LAUNCH();
  if (targets) k.add_row_losses(row_losses, N, loss);
}

template <class S>
void queue_logit_slice_softmax(CudaKernelContext& k, S* logits_to_probs, const float* row_stats, int N, int V, int Vp) {
  k.use_device();
  if (N == 0 || Vp == 0) return;
  logit_slice_softmax_kernel<<<static_cast<unsigned>(N), kBlock, 0, k.stream>>>(logits_to_probs, row_stats, V, Vp);
  ST_CHECK_LAUNCH();
}

}  // namespace

// ---- the context ----

const KernelScratch& CudaKernelContext::reserve(const KernelWorkload& workload, KernelScratchChoices choices) {
  use_device();
  if (workload.embeds && workload.rows > 0) {
    // cub's own figure for encoder_backward's sort (a size query: nothing is read or written).
    std::size_t temp_bytes = 0;
    const int* none_in = nullptr;
    int* none_out = nullptr;
    ST_CHECK_CUDA(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, none_in, none_out, none_in, none_out,
                                                  static_cast<int>(workload.rows), 0, 32, stream));
    choices.sort_temp_bytes = temp_bytes;
  }
  const KernelScratch s = kernel_scratch(workload, choices);
  // A block only grows: with several models on these kernels, each the largest asked.
  for (auto field : {&KernelScratch::matmul_weight, &KernelScratch::matmul_rows_in, &KernelScratch::matmul_rows_out,
                     &KernelScratch::lt_workspace, &KernelScratch::partials, &KernelScratch::sort_keys,
                     &KernelScratch::sort_values, &KernelScratch::sort_temp, &KernelScratch::row_losses})
    reserved.*field = std::max(reserved.*field, s.*field);
  partials.reserve(reserved.partials, stream);
  sort_keys.reserve(reserved.sort_keys, stream);
  sort_values.reserve(reserved.sort_values, stream);
  sort_temp.reserve(reserved.sort_temp, stream);
  row_losses.reserve(reserved.row_losses, stream);
  return reserved;
}

float* CudaKernelContext::bias_partials(bool wanted, int N, int C) {
  if (!wanted || N == 0 || C == 0) return nullptr;
  const int chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  ST_REQUIRE(chunks <= 65535, "CUDA parameter gradients: more rows than the chunked column sums allow");
  return partials.get<float>(static_cast<std::size_t>(chunks) * C, stream);
}

void CudaKernelContext::add_bias_partials(float* dst, const float* chunk_sums, int N, int C) {
  add_partials(dst, chunk_sums, (N + kRowsPerChunk - 1) / kRowsPerChunk, C, stream);
  ST_CHECK_LAUNCH();
}

void CudaKernelContext::add_row_losses(const double* losses, int N, LossSum loss) {
  // One block, in an order that depends only on N (the same total on every run), added to the
  // step's total on the device: nothing waits.
  if (!loss.total) return;
  sum_in_one_block<<<1, 1024, 0, stream>>>(loss.total, losses, N, loss.divisor, true);
  ST_CHECK_LAUNCH();
}

// ---- fp32 storage ----

void CudaLayerKernels::reserve_scratch(const KernelWorkload& workload) {
  KernelScratchChoices choices;
  choices.bf16_matmuls = bf16_;
  choices.fused_classifier = fused_;
  bf16_matmuls_.reserve(ctx_.reserve(workload, choices));
}

void CudaLayerKernels::encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T,
                                       int C) {
  queue_encoder_forward(ctx_, out, tokens, wte, wpe, B, T, C);
}

void CudaLayerKernels::encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T,
                                        int C) {
  queue_encoder_backward(ctx_, dwte, dwpe, dout, tokens, B, T, C);
}

void CudaLayerKernels::layernorm_forward(float* out, float* mean, float* rstd, const float* in, const float* weight,
                                         const float* bias, int N, int C) {
  queue_layernorm_forward<float>(ctx_, out, mean, rstd, nullptr, in, nullptr, weight, bias, N, C);
}

void CudaLayerKernels::residual_layernorm_forward(float* res, float* out, float* mean, float* rstd, const float* a,
                                                  const float* b, const float* weight, const float* bias, int N,
                                                  int C) {
  queue_layernorm_forward(ctx_, out, mean, rstd, res, a, b, weight, bias, N, C);
}

void CudaLayerKernels::layernorm_backward(float* din, float* dweight, float* dbias, const float* dout, const float* in,
                                          const float* weight, const float* mean, const float* rstd, int N, int C) {
  queue_layernorm_backward(ctx_, din, dweight, dbias, dout, in, weight, mean, rstd, N, C);
}

// Row-major X[rows, cols] is, to cuBLAS, the column-major X^T with leading dimension cols; the
// three products below are written in that view.
void CudaLayerKernels::linear_forward(float* out, const float* in, const float* weight, const float* bias, int N,
                                      int C, int OC) {
  ctx_.use_device();
  if (N == 0 || OC == 0) return;
  // bf16: the bias added by cuBLASLt's epilogue where it can (Bf16Matmuls::forward).
  if (bf16_) return bf16_matmuls_.forward(out, in, weight, bias, N, C, OC);
  // out = bias, before the product adds in W^T (as the host does).
  if (bias) broadcast_rows(out, bias, N, OC, ctx_.stream);
  const float beta = bias ? 1.0f : 0.0f;
  // out^T[OC, N] = W[OC, C] in^T[C, N]
  cuda_gemm(ctx_.cublas, false, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, 1.0f, weight, C, in, C, beta, out, OC);
}

void CudaLayerKernels::linear_backward(float* din, float* dweight, float* dbias, const float* dout, const float* in,
                                       const float* weight, int N, int C, int OC, bool accumulate_din) {
  ctx_.use_device();
  const float beta = accumulate_din ? 1.0f : 0.0f;
  if (bf16_) {
    // dout rounded once for both products, the bias gradient's column sums in the same pass.
    float* partials = ctx_.bias_partials(dbias != nullptr, N, OC);
    bf16_matmuls_.backward(din, dweight, partials, dout, in, weight, N, C, OC, beta);
    if (partials) ctx_.add_bias_partials(dbias, partials, N, OC);
    return;
  }
  // din^T[C, N] = W^T[C, OC] dout^T[OC, N]
  cuda_gemm(ctx_.cublas, false, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, 1.0f, weight, C, dout, OC, beta, din, C);
  // dW^T[C, OC] += in^T[C, N] dout[N, OC]
  cuda_gemm(ctx_.cublas, false, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, 1.0f, in, C, dout, OC, 1.0f, dweight, C);
  if (dbias) add_column_sums(ctx_, dbias, dout, N, OC);
}

void CudaLayerKernels::linear_gelu_forward(float* out, float* pre, const float* in, const float* weight,
                                           const float* bias, int N, int C, int OC) {
  ctx_.use_device();
  if (gelu_fusion_ && bf16_matmuls_.forward_gelu(out, pre, in, weight, bias, N, C, OC)) return;
  LayerKernels<float>::linear_gelu_forward(out, pre, in, weight, bias, N, C, OC);
}

void CudaLayerKernels::linear_backward_gelu(float* dpre, float* scratch, float* dweight, float* dbias,
                                            const float* dout, const float* in, const float* pre, const float* weight,
                                            int N, int C, int OC) {
  ctx_.use_device();
  if (gelu_fusion_) {
    float* partials = ctx_.bias_partials(dbias != nullptr, N, OC);
    if (bf16_matmuls_.backward_dgelu(dpre, dweight, partials, dout, in, pre, weight, N, C, OC)) {
      if (partials) ctx_.add_bias_partials(dbias, partials, N, OC);
      return;
    }
  }
  LayerKernels<float>::linear_backward_gelu(dpre, scratch, dweight, dbias, dout, in, pre, weight, N, C, OC);
}

void CudaLayerKernels::gelu_forward(float* out, const float* in, std::size_t n) { queue_gelu_forward(ctx_, out, in, n); }

void CudaLayerKernels::gelu_backward(float* din, const float* in, const float* dout, std::size_t n) {
  queue_gelu_backward(ctx_, din, in, dout, n);
}

void CudaLayerKernels::add(float* out, const float* a, const float* b, std::size_t n) { queue_add(ctx_, out, a, b, n); }

void CudaLayerKernels::softmax_cross_entropy_forward(float* logits_to_probs, float* losses, const int* targets, int N,
                                                     int V, int Vp, LossSum loss) {
  queue_softmax_cross_entropy_forward(ctx_, logits_to_probs, losses, targets, N, V, Vp, loss);
}

// The whole vocabulary is the slice that starts at token 0 and holds every target.
void CudaLayerKernels::softmax_cross_entropy_backward(float* probs_to_dlogits, const int* targets, int N, int V,
                                                      int Vp, float scale) {
  queue_logit_slice_backward(ctx_, probs_to_dlogits, targets, N, V, Vp, 0, scale);
}

void CudaLayerKernels::logit_slice_stats(const float* logits, const int* targets, float* stats, int N, int V, int Vp,
                                         int first) {
  queue_logit_slice_stats(ctx_, logits, targets, stats, N, V, Vp, first);
}

void CudaLayerKernels::logit_slices_combine(const float* gathered, float* row_stats, float* losses,
                                            const int* targets, int N, int parts, LossSum loss) {
  queue_logit_slices_combine(ctx_, gathered, row_stats, losses, targets, N, parts, loss);
}

void CudaLayerKernels::logit_slice_softmax(float* logits_to_probs, const float* row_stats, int N, int V, int Vp) {
  queue_logit_slice_softmax(ctx_, logits_to_probs, row_stats, N, V, Vp);
}

void CudaLayerKernels::logit_slice_backward(float* probs_to_dlogits, const int* targets, int N, int V, int Vp,
                                            int first, float scale) {
  queue_logit_slice_backward(ctx_, probs_to_dlogits, targets, N, V, Vp, first, scale);
}

// ---- bf16 storage ----

void CudaBf16LayerKernels::reserve_scratch(const KernelWorkload& workload) {
  KernelScratchChoices choices;
  choices.bf16_storage = true;  // no operand rounding scratch; cuBLASLt's workspace for the biases
  choices.fused_classifier = true;
  lt_.reserve_workspace(ctx_.reserve(workload, choices).lt_workspace);
}

void CudaBf16LayerKernels::encoder_forward(Bf16* out, const int* tokens, const Bf16* wte, const Bf16* wpe, int B, int T,
                                           int C) {
  queue_encoder_forward(ctx_, out, tokens, wte, wpe, B, T, C);
}

void CudaBf16LayerKernels::encoder_backward(float* dwte, float* dwpe, const Bf16* dout, const int* tokens, int B,
                                            int T, int C) {
  queue_encoder_backward(ctx_, dwte, dwpe, dout, tokens, B, T, C);
}

void CudaBf16LayerKernels::layernorm_forward(Bf16* out, float* mean, float* rstd, const Bf16* in, const Bf16* weight,
                                             const Bf16* bias, int N, int C) {
  queue_layernorm_forward<Bf16>(ctx_, out, mean, rstd, nullptr, in, nullptr, weight, bias, N, C);
}

void CudaBf16LayerKernels::residual_layernorm_forward(Bf16* res, Bf16* out, float* mean, float* rstd, const Bf16* a,
                                                      const Bf16* b, const Bf16* weight, const Bf16* bias, int N,
                                                      int C) {
  queue_layernorm_forward(ctx_, out, mean, rstd, res, a, b, weight, bias, N, C);
}

void CudaBf16LayerKernels::layernorm_backward(Bf16* din, float* dweight, float* dbias, const Bf16* dout,
                                              const Bf16* in, const Bf16* weight, const float* mean,
                                              const float* rstd, int N, int C) {
  queue_layernorm_backward(ctx_, din, dweight, dbias, dout, in, weight, mean, rstd, N, C);
}

// The products in cuBLAS's column-major view, as CudaLayerKernels' (row-major X[rows, cols] is
// X^T with leading dimension cols), on bf16 operands with fp32 sums.
namespace {
// A bf16 operand as cuBLASLt's products take it (LtProduct).
const std::uint16_t* bf16_bits(const Bf16* p) { return reinterpret_cast<const std::uint16_t*>(p); }
}  // namespace

void CudaBf16LayerKernels::linear_forward(Bf16* out, const Bf16* in, const Bf16* weight, const Bf16* bias, int N,
                                          int C, int OC) {
  ctx_.use_device();
  if (N == 0 || OC == 0) return;
  // out^T[OC, N] = W[OC, C] in^T[C, N] + bias, the bias added in fp32 by cuBLASLt's epilogue and
  // the sum rounded once, where it has an algorithm for the shapes.
  const LtProduct with_bias{CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, bf16_bits(weight), C, bf16_bits(in), C, out,
                            LtEpilogue::bias, bias, nullptr, CUDA_R_16BF};
  if (bias && lt_.supports(with_bias)) return lt_.run(with_bias);
  // Else out = bias, then the product adds to it in fp32 and rounds the sum once (the bias is
  // bf16: broadcasting it rounds nothing).
  if (bias) broadcast_rows(out, bias, N, OC, ctx_.stream);
  // out^T[OC, N] = W[OC, C] in^T[C, N] (+ out^T)
  cuda_gemm_bf16(ctx_.cublas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, 1.0f, weight, C, in, C, bias ? 1.0f : 0.0f, out,
                 CUDA_R_16BF, OC);
}

void CudaBf16LayerKernels::linear_backward(Bf16* din, float* dweight, float* dbias, const Bf16* dout, const Bf16* in,
                                           const Bf16* weight, int N, int C, int OC, bool accumulate_din) {
  ctx_.use_device();
  if (N == 0) return;
  // din^T[C, N] = W^T[C, OC] dout^T[OC, N] (+ din^T, read in fp32 and the sum rounded once)
  cuda_gemm_bf16(ctx_.cublas, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, 1.0f, weight, C, dout, OC,
                 accumulate_din ? 1.0f : 0.0f, din, CUDA_R_16BF, C);
  // dW^T[C, OC] += in^T[C, N] dout[N, OC], in fp32
  cuda_gemm_bf16(ctx_.cublas, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, 1.0f, in, C, dout, OC, 1.0f, dweight, CUDA_R_32F, C);
  if (dbias) add_column_sums(ctx_, dbias, dout, N, OC);
}

void CudaBf16LayerKernels::linear_gelu_forward(Bf16* out, Bf16* pre, const Bf16* in, const Bf16* weight,
                                               const Bf16* bias, int N, int C, int OC) {
  ctx_.use_device();
  if (gelu_fusion_ && N > 0 && C > 0 && OC > 0 && bias) {
    // out^T[OC, N] = gelu(W[OC, C] in^T[C, N] + bias), pre^T the argument, both rounded once
    const LtProduct fused{CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, bf16_bits(weight), C, bf16_bits(in), C, out,
                          LtEpilogue::gelu_aux_bias, bias, pre, CUDA_R_16BF};
    if (lt_.supports(fused)) return lt_.run(fused);
  }
  LayerKernels<float, Bf16>::linear_gelu_forward(out, pre, in, weight, bias, N, C, OC);
}

void CudaBf16LayerKernels::linear_backward_gelu(Bf16* dpre, Bf16* scratch, float* dweight, float* dbias,
                                                const Bf16* dout, const Bf16* in, const Bf16* pre, const Bf16* weight,
                                                int N, int C, int OC) {
  ctx_.use_device();
  if (gelu_fusion_ && N > 0 && C > 0 && OC > 0) {
    // dpre^T[C, N] = (W^T[C, OC] dout^T[OC, N]) * gelu'(pre^T), rounded once
    const LtProduct fused{CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, bf16_bits(weight), C, bf16_bits(dout), OC, dpre,
                          LtEpilogue::dgelu, nullptr, const_cast<Bf16*>(pre), CUDA_R_16BF};
    if (lt_.supports(fused)) {
      // The weight's gradient reads `in` (which may be dpre's memory) before dpre is written: both
      // queued in this order on the stream.
      cuda_gemm_bf16(ctx_.cublas, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, 1.0f, in, C, dout, OC, 1.0f, dweight, CUDA_R_32F,
                     C);
      if (dbias) add_column_sums(ctx_, dbias, dout, N, OC);
      return lt_.run(fused);
    }
  }
  LayerKernels<float, Bf16>::linear_backward_gelu(dpre, scratch, dweight, dbias, dout, in, pre, weight, N, C, OC);
}

void CudaBf16LayerKernels::gelu_forward(Bf16* out, const Bf16* in, std::size_t n) {
  queue_gelu_forward(ctx_, out, in, n);
}

void CudaBf16LayerKernels::gelu_backward(Bf16* din, const Bf16* in, const Bf16* dout, std::size_t n) {
  queue_gelu_backward(ctx_, din, in, dout, n);
}

void CudaBf16LayerKernels::add(Bf16* out, const Bf16* a, const Bf16* b, std::size_t n) { queue_add(ctx_, out, a, b, n); }

void CudaBf16LayerKernels::softmax_cross_entropy_forward(Bf16* logits_to_probs, float* losses, const int* targets,
                                                         int N, int V, int Vp, LossSum loss) {
  queue_softmax_cross_entropy_forward(ctx_, logits_to_probs, losses, targets, N, V, Vp, loss);
}

void CudaBf16LayerKernels::softmax_cross_entropy_backward(Bf16* probs_to_dlogits, const int* targets, int N, int V,
                                                          int Vp, float scale) {
  queue_logit_slice_backward(ctx_, probs_to_dlogits, targets, N, V, Vp, 0, scale);
}

void CudaBf16LayerKernels::logit_slice_stats(const Bf16* logits, const int* targets, float* stats, int N, int V,
                                             int Vp, int first) {
  queue_logit_slice_stats(ctx_, logits, targets, stats, N, V, Vp, first);
}

void CudaBf16LayerKernels::logit_slices_combine(const float* gathered, float* row_stats, float* losses,
                                                const int* targets, int N, int parts, LossSum loss) {
  queue_logit_slices_combine(ctx_, gathered, row_stats, losses, targets, N, parts, loss);
}

void CudaBf16LayerKernels::logit_slice_softmax(Bf16* logits_to_probs, const float* row_stats, int N, int V, int Vp) {
  queue_logit_slice_softmax(ctx_, logits_to_probs, row_stats, N, V, Vp);
}

void CudaBf16LayerKernels::logit_slice_backward(Bf16* probs_to_dlogits, const int* targets, int N, int V, int Vp,
                                                int first, float scale) {
  queue_logit_slice_backward(ctx_, probs_to_dlogits, targets, N, V, Vp, first, scale);
}

}  // namespace st
