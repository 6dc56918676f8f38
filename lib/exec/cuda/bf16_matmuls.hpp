#pragma once
// A linear layer's three products with bf16 operands: fp32 in memory, rounded to bf16 (as the
// host's to_bf16 rounds) into device scratch, multiplied on the tensor cores with fp32
// accumulation and fp32 results. Handing cuBLAS the fp32 operands with
// CUBLAS_COMPUTE_32F_FAST_16BF instead lets it pick any kernel at least that precise, and on an
// H200 it ran TF32 kernels, at half the bf16 rate (docs/gpu.md, the kernel profile).
//
// The activation operands are converted in pieces of rows, at most `piece_elements` each, so the
// scratch stays bounded whatever the batch: a piece's products are independent rows of the
// result, or, for the weight gradient, successive terms of its sum over rows (accumulated in
// fp32, in the same order on every run). The weight is converted whole, once per call.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "exec/cuda/device_scratch.hpp"

namespace st {

class Bf16Matmuls {
 public:
  // 64 Mi elements (128 MiB of bf16) per piece: the language-model head's gradient (a few
  // thousand rows of 50304) still makes products wide enough to fill an H200.
  static constexpr std::size_t kPieceElements = std::size_t{1} << 26;

  Bf16Matmuls(cudaStream_t stream, cublasHandle_t cublas, std::size_t piece_elements = kPieceElements)
      : stream_(stream), cublas_(cublas), piece_elements_(piece_elements) {}

  // Row-major, as the layer kernels hold them: in [N, C], weight [OC, C], out/dout [N, OC].
  // out = in weight^T + beta out.
  void forward(float* out, const float* in, const float* weight, int N, int C, int OC, float beta);
  // din = dout weight + beta din.
  void input_gradient(float* din, const float* dout, const float* weight, int N, int C, int OC, float beta);
  // dweight += dout^T in.
  void weight_gradient(float* dweight, const float* dout, const float* in, int N, int C, int OC);

  // The LM head of the fused classifier (exec/classifier_reference.hpp), whose logits and
  // d(loss)/d(logits) are bf16 in memory. out[N, OC] (bf16) = in weight^T, the fp32 sum rounded
  // to bf16 once by cuBLAS's epilogue.
  void forward_to_bf16(std::uint16_t* out, const float* in, const float* weight, int N, int C, int OC);
  // From a bf16 dout, which is an operand as it is (no rounding, no scratch for it):
  // din = alpha dout weight (overwritten) and dweight += alpha dout^T in. alpha carries the
  // loss's scale, applied to the fp32 sums.
  void input_gradient_from_bf16(float* din, const std::uint16_t* dout, const float* weight, int N, int C, int OC,
                                float alpha);
  void weight_gradient_from_bf16(float* dweight, const std::uint16_t* dout, const float* in, int N, int C, int OC,
                                 float alpha);

 private:
  // out[N, out_cols] = rows_in[N, in_cols] op(W) + beta out, op(W) = W^T for a weight [out_cols,
  // in_cols] (the forward) or W for one [in_cols, out_cols] (the input gradient).
  void rows_times_weight(float* out, int out_cols, const float* rows_in, int in_cols, const float* weight,
                         bool transpose_weight, int N, float beta);
  // Rows of `cols` elements per piece: at least one.
  int rows_per_piece(int cols, int rows) const;
  const std::uint16_t* to_bf16(DeviceScratch& scratch, const float* from, std::size_t n);

  cudaStream_t stream_;
  cublasHandle_t cublas_;
  std::size_t piece_elements_;
  DeviceScratch weight_, piece_a_, piece_b_;
};

}  // namespace st
