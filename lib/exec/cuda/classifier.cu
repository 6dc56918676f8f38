// CudaLayerKernels' and CudaBf16LayerKernels' fused classifier (llm.c's fused_classifier): the LM head's logits in bf16,
// and training's cross-entropy as one kernel per row that gives the loss and overwrites the row
// with d(loss)/d(logits), so the logits are never stored in fp32 and the probabilities never
// kept. The contract, and the reference the GPU tests hold these kernels to, is
// exec/classifier_reference.hpp: the same expressions in the same order per element, fp32 math
// on bf16 values, each result rounded to bf16 once as st::to_bf16 rounds.
//
// One block per row. The first pass reads the row once for its max and its sum of e^(x - max)
// (online: each thread rescales its running sum when its max grows; the threads' pairs are then
// combined through two block reductions in a fixed tree, so the same inputs give the same bits);
// the second pass reads it again, mostly from L2, and writes softmax - onehot(target) (or the
// probabilities, without targets) over it. Rows whose width is a multiple of 8 are read and
// written 16 bytes (8 values) at a time.
#include <cmath>
#include <cstdint>

#include "exec/cuda/bf16_bits.cuh"
#include "exec/cuda/cuda_bf16_layer_kernels.hpp"
#include "exec/cuda/cuda_checks.hpp"
#include "exec/cuda/cuda_gemm.hpp"
#include "exec/cuda/cuda_layer_kernels.hpp"
#include "exec/cuda/device_reduce.cuh"

namespace st {
namespace {

using namespace cuda_detail;

// Threads per row: a GPT-2 row (50304 values) is 6288 vectors of 8, about 12 per thread.
constexpr int kRowThreads = 512;
constexpr int kVector = 8;  // bf16 values per 16-byte load

struct RowStatistics {
  float max;  // over the first V columns; -inf for none
  float sum;  // of e^(x - max) over them; 0 for none
};

// Calls f(column, value) for every column of [0, width) this thread owns: runs of kVec values,
// the runs dealt to the threads in turn. kVec = 8 needs the row 16-byte aligned and its stride a
// multiple of 8 (vectorised()); a run then never crosses the padded row's end.
template <int kVec, class F>
__device__ void for_each_value(const std::uint16_t* row, int width, F f) {
  for (int c = threadIdx.x * kVec; c < width; c += blockDim.x * kVec) {
    if constexpr (kVec == 1) {
      f(c, bf16_bits_to_f32(row[c]));
    } else {
      const uint4 raw = *reinterpret_cast<const uint4*>(row + c);
      const auto* v = reinterpret_cast<const std::uint16_t*>(&raw);
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        if (c + e < width) f(c + e, bf16_bits_to_f32(v[e]));
    }
  }
}

// The row's max and sum of exponentials over its first V columns, in every thread.
template <int kVec>
__device__ RowStatistics row_statistics(const std::uint16_t* row, int V, float* shared) {
  float max = -INFINITY, sum = 0.0f;
  for_each_value<kVec>(row, V, [&](int, float x) {
    if (x > max) {
      sum = sum * expf(max - x) + 1.0f;  // 0 * e^-inf = 0 for the first value
      max = x;
    } else {
      sum += expf(x - max);
    }
  });
  const float row_max = block_reduce(max, Max{}, -INFINITY, shared);
  // A thread that saw no value (max -inf) adds 0, not 0 * e^(-inf + inf).
  const float mine = sum > 0.0f ? sum * expf(max - row_max) : 0.0f;
  return {row_max, block_reduce(mine, Sum{}, 0.0f, shared)};
}

// Overwrites the row: e^(x - max) inv over the first V columns, less 1 at column `target`
// (none: -1), 0 over the padding. Each thread writes the columns it read in row_statistics.
template <int kVec>
__device__ void write_probabilities(std::uint16_t* row, int V, int Vp, float max, float inv, int target) {
  auto value = [&](int j, float x) {
    if (j >= V) return std::uint16_t{0};
    const float p = expf(x - max) * inv;
    return f32_to_bf16_bits(j == target ? p - 1.0f : p);
  };
  for (int c = threadIdx.x * kVec; c < Vp; c += blockDim.x * kVec) {
    if constexpr (kVec == 1) {
      row[c] = value(c, bf16_bits_to_f32(row[c]));
    } else {
      uint4 raw = *reinterpret_cast<const uint4*>(row + c);
      auto* v = reinterpret_cast<std::uint16_t*>(&raw);
#pragma unroll
      for (int e = 0; e < kVec; ++e) v[e] = value(c + e, bf16_bits_to_f32(v[e]));
      *reinterpret_cast<uint4*>(row + c) = raw;
    }
  }
}

// Whole rows, one block each. With targets: losses[row] = log sum + max - x[target] (float, and
// double into row_losses for the fixed-order total) and the row becomes softmax - onehot; without,
// the probabilities.
template <int kVec>
__global__ void __launch_bounds__(kRowThreads)
    classifier_rows_kernel(std::uint16_t* logits, float* losses, double* row_losses, const int* targets, int V,
                           int Vp) {
  __shared__ float shared[kWarp];
  const int row = blockIdx.x;
  std::uint16_t* x = logits + static_cast<std::size_t>(row) * Vp;
  const int target = targets ? targets[row] : -1;
  // Read before the row is overwritten (row_statistics' barriers order it before the writes).
  const float target_logit = targets && threadIdx.x == 0 ? bf16_bits_to_f32(x[target]) : 0.0f;
  const RowStatistics s = row_statistics<kVec>(x, V, shared);
  write_probabilities<kVec>(x, V, Vp, s.max, 1.0f / s.sum, target);
  if (targets && threadIdx.x == 0) {
    const double loss = log(static_cast<double>(s.sum)) + static_cast<double>(s.max) - target_logit;
    losses[row] = static_cast<float>(loss);
    row_losses[row] = loss;
  }
}

// A slice of the vocabulary (columns from token `first` on, the first V real), one block per row:
// stats[3 row] = max, stats[3 row + 1] = sum of e^(x - max), stats[3 row + 2] = the target's logit
// where the slice holds it, else 0: kernels::logit_slice_stats' layout, for logit_slices_combine.
template <int kVec>
__global__ void __launch_bounds__(kRowThreads)
    classifier_slice_stats_kernel(const std::uint16_t* logits, const int* targets, float* stats, int V, int Vp,
                                  int first) {
  __shared__ float shared[kWarp];
  const int row = blockIdx.x;
  const std::uint16_t* x = logits + static_cast<std::size_t>(row) * Vp;
  const RowStatistics s = row_statistics<kVec>(x, V, shared);
  if (threadIdx.x == 0) {
    const int local = targets ? targets[row] - first : -1;
    float* out = stats + 3 * static_cast<std::size_t>(row);
    out[0] = s.max;
    out[1] = s.sum;
    out[2] = local >= 0 && local < V ? bf16_bits_to_f32(x[local]) : 0.0f;
  }
}

// A slice's rows from the group's combined statistics (row_stats[2 row] = max, [2 row + 1] = sum):
// softmax - onehot where targets are given (the one only where the slice holds the target), else
// the probabilities.
template <int kVec>
__global__ void __launch_bounds__(kRowThreads)
    classifier_slice_write_kernel(std::uint16_t* logits, const float* row_stats, const int* targets, int V, int Vp,
                                  int first) {
  const int row = blockIdx.x;
  std::uint16_t* x = logits + static_cast<std::size_t>(row) * Vp;
  const float max = row_stats[2 * row];
  const float inv = static_cast<float>(1.0 / static_cast<double>(row_stats[2 * row + 1]));
  write_probabilities<kVec>(x, V, Vp, max, inv, targets ? targets[row] - first : -1);
}

// 16-byte loads and stores: every row starts 16-byte aligned.
bool vectorised(const void* logits, int Vp) {
  return Vp % kVector == 0 && reinterpret_cast<std::uintptr_t>(logits) % 16 == 0;
}

std::uint16_t* bits(Bf16* p) { return reinterpret_cast<std::uint16_t*>(p); }
const std::uint16_t* bits(const Bf16* p) { return reinterpret_cast<const std::uint16_t*>(p); }

// The row kernels, whole rows or 16 bytes at a time (vectorised()).
void queue_cross_entropy(CudaKernelContext& k, Bf16* logits_to_dlogits, float* losses, const int* targets, int N,
                         int V, int Vp, LossSum loss) {
  k.use_device();
  ST_REQUIRE(targets, "classifier_cross_entropy needs targets (classifier_softmax normalises without)");
  if (N == 0) return;
  double* row_losses = k.row_losses.get<double>(static_cast<std::size_t>(N), k.stream);
  const auto blocks = static_cast<unsigned>(N);
  if (vectorised(logits_to_dlogits, Vp))
    classifier_rows_kernel<kVector>
        <<<blocks, kRowThreads, 0, k.stream>>>(bits(logits_to_dlogits), losses, row_losses, targets, V, Vp);
  else
    classifier_rows_kernel<1>
        <<<blocks, kRowThreads, 0, k.stream>>>(bits(logits_to_dlogits), losses, row_losses, targets, V, Vp);
  ST_CHECK_LAUNCH();
  k.add_row_losses(row_losses, N, loss);
}

void queue_softmax(CudaKernelContext& k, Bf16* logits_to_probs, int N, int V, int Vp) {
  k.use_device();
  if (N == 0) return;
  const auto blocks = static_cast<unsigned>(N);
  if (vectorised(logits_to_probs, Vp))
    classifier_rows_kernel<kVector>
        <<<blocks, kRowThreads, 0, k.stream>>>(bits(logits_to_probs), nullptr, nullptr, nullptr, V, Vp);
  else
    classifier_rows_kernel<1><<<blocks, kRowThreads, 0, k.stream>>>(bits(logits_to_probs), nullptr, nullptr, nullptr,
                                                                    V, Vp);
  ST_CHECK_LAUNCH();
}

void queue_slice_stats(CudaKernelContext& k, const Bf16* logits, const int* targets, float* stats, int N, int V,
                       int Vp, int first) {
  k.use_device();
  if (N == 0) return;
  const auto blocks = static_cast<unsigned>(N);
  if (vectorised(logits, Vp))
    classifier_slice_stats_kernel<kVector>
        <<<blocks, kRowThreads, 0, k.stream>>>(bits(logits), targets, stats, V, Vp, first);
  else
    classifier_slice_stats_kernel<1><<<blocks, kRowThreads, 0, k.stream>>>(bits(logits), targets, stats, V, Vp, first);
  ST_CHECK_LAUNCH();
}

// The probabilities (targets null) or d(loss)/d(logits) of a slice from the combined statistics.
void queue_slice_write(CudaKernelContext& k, Bf16* logits, const float* row_stats, const int* targets, int N, int V,
                       int Vp, int first) {
  k.use_device();
  if (N == 0 || Vp == 0) return;
  const auto blocks = static_cast<unsigned>(N);
  if (vectorised(logits, Vp))
    classifier_slice_write_kernel<kVector>
        <<<blocks, kRowThreads, 0, k.stream>>>(bits(logits), row_stats, targets, V, Vp, first);
  else
    classifier_slice_write_kernel<1>
        <<<blocks, kRowThreads, 0, k.stream>>>(bits(logits), row_stats, targets, V, Vp, first);
  ST_CHECK_LAUNCH();
}

}  // namespace

// ---- fp32 storage: the head's operands rounded by Bf16Matmuls ----

void CudaLayerKernels::classifier_logits(Bf16* logits, const float* in, const float* weight, int N, int C, int OC) {
  ctx_.use_device();
  bf16_matmuls_.forward_to_bf16(bits(logits), in, weight, N, C, OC);
}

void CudaLayerKernels::classifier_backward(float* din, float* dweight, const Bf16* dlogits, const float* in,
                                           const float* weight, int N, int C, int OC, float scale) {
  ctx_.use_device();
  bf16_matmuls_.input_gradient_from_bf16(din, bits(dlogits), weight, N, C, OC, scale);
  bf16_matmuls_.weight_gradient_from_bf16(dweight, bits(dlogits), in, N, C, OC, scale);
}

// ---- bf16 storage: the head's operands as they are ----

void CudaBf16LayerKernels::classifier_logits(Bf16* logits, const Bf16* in, const Bf16* weight, int N, int C, int OC) {
  ctx_.use_device();
  if (N == 0 || OC == 0) return;
  // logits^T[OC, N] = W[OC, C] in^T[C, N], the fp32 sum rounded once
  cuda_gemm_bf16(ctx_.cublas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, 1.0f, weight, C, in, C, 0.0f, logits, CUDA_R_16BF,
                 OC);
}

void CudaBf16LayerKernels::classifier_backward(Bf16* din, float* dweight, const Bf16* dlogits, const Bf16* in,
                                               const Bf16* weight, int N, int C, int OC, float scale) {
  ctx_.use_device();
  if (N == 0 || C == 0) return;
  // din^T[C, N] = scale W^T[C, OC] dlogits^T[OC, N], rounded once
  cuda_gemm_bf16(ctx_.cublas, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, scale, weight, C, dlogits, OC, 0.0f, din,
                 CUDA_R_16BF, C);
  // dW^T[C, OC] += scale in^T[C, N] dlogits[N, OC], in fp32
  cuda_gemm_bf16(ctx_.cublas, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, scale, in, C, dlogits, OC, 1.0f, dweight, CUDA_R_32F,
                 C);
}

// ---- CudaLayerKernels: the cross-entropy on bf16 logits ----

void CudaLayerKernels::classifier_cross_entropy(Bf16* logits_to_dlogits, float* losses, const int* targets, int N, int V, int Vp,
                                     LossSum loss) {
  queue_cross_entropy(ctx_, logits_to_dlogits, losses, targets, N, V, Vp, loss);
}

void CudaLayerKernels::classifier_softmax(Bf16* logits_to_probs, int N, int V, int Vp) {
  queue_softmax(ctx_, logits_to_probs, N, V, Vp);
}

void CudaLayerKernels::classifier_slice_stats(const Bf16* logits, const int* targets, float* stats, int N, int V, int Vp,
                                   int first) {
  queue_slice_stats(ctx_, logits, targets, stats, N, V, Vp, first);
}

void CudaLayerKernels::classifier_slice_dlogits(Bf16* logits_to_dlogits, const float* row_stats, const int* targets, int N,
                                     int V, int Vp, int first) {
  queue_slice_write(ctx_, logits_to_dlogits, row_stats, targets, N, V, Vp, first);
}

void CudaLayerKernels::classifier_slice_softmax(Bf16* logits_to_probs, const float* row_stats, int N, int V, int Vp) {
  queue_slice_write(ctx_, logits_to_probs, row_stats, nullptr, N, V, Vp, 0);
}

// ---- CudaBf16LayerKernels: the cross-entropy on bf16 logits ----

void CudaBf16LayerKernels::classifier_cross_entropy(Bf16* logits_to_dlogits, float* losses, const int* targets, int N, int V, int Vp,
                                     LossSum loss) {
  queue_cross_entropy(ctx_, logits_to_dlogits, losses, targets, N, V, Vp, loss);
}

void CudaBf16LayerKernels::classifier_softmax(Bf16* logits_to_probs, int N, int V, int Vp) {
  queue_softmax(ctx_, logits_to_probs, N, V, Vp);
}

void CudaBf16LayerKernels::classifier_slice_stats(const Bf16* logits, const int* targets, float* stats, int N, int V, int Vp,
                                   int first) {
  queue_slice_stats(ctx_, logits, targets, stats, N, V, Vp, first);
}

void CudaBf16LayerKernels::classifier_slice_dlogits(Bf16* logits_to_dlogits, const float* row_stats, const int* targets, int N,
                                     int V, int Vp, int first) {
  queue_slice_write(ctx_, logits_to_dlogits, row_stats, targets, N, V, Vp, first);
}

void CudaBf16LayerKernels::classifier_slice_softmax(Bf16* logits_to_probs, const float* row_stats, int N, int V, int Vp) {
  queue_slice_write(ctx_, logits_to_probs, row_stats, nullptr, N, V, Vp, 0);
}

}  // namespace st
