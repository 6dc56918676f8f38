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
// fp32, in the same order on every run). The weight is converted whole, once per call. In the
// backward each piece of dout is converted once and serves both products.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "exec/cuda/device_scratch.hpp"
#include "exec/kernel_scratch.hpp"
#include "exec/cuda/lt_matmul.hpp"

namespace st {

class Bf16Matmuls {
 public:
  // Elements per piece (exec/kernel_scratch.hpp, which sizes the scratch from it).
  static constexpr std::size_t kPieceElements = kMatmulPieceElements;

  Bf16Matmuls(cudaStream_t stream, cublasHandle_t cublas, std::size_t piece_elements = kPieceElements)
      : stream_(stream), cublas_(cublas), piece_elements_(piece_elements), lt_(stream) {}

  // Row-major, as the layer kernels hold them: in [N, C], weight [OC, C], out/dout [N, OC].
  // out = in weight^T (+ bias on every row, where bias is not null: by cuBLASLt's epilogue where
  // it has an algorithm for the shapes, else broadcast into out before the product).
  void forward(float* out, const float* in, const float* weight, const float* bias, int N, int C, int OC);
  // GPT-2's MLP input layer through cuBLASLt's GELU epilogue: pre = in weight^T + bias and
  // out = gelu(pre) in the product's write. false, with nothing queued, where cuBLASLt has no
  // algorithm for some piece (OC not a multiple of 8, unaligned rows): the caller composes.
  // The GELU is cuBLASLt's tanh approximation: within 1e-4 of gelu_forward's, not its bits.
  bool forward_gelu(float* out, float* pre, const float* in, const float* weight, const float* bias, int N, int C,
                    int OC);
  // The backward from an fp32 dout, rounded to bf16 once per piece of rows for both products:
  // din = dout weight + beta din, and dweight += dout^T in. With bias_partials, the same pass
  // writes the fp32 column sums of dout per chunk of kRowsPerChunk rows
  // (bias_partials[ceil(N / kRowsPerChunk), OC]; the pieces end on chunk boundaries), which the
  // caller adds in chunk order: the bias gradient without another read of dout.
  void backward(float* din, float* dweight, float* bias_partials, const float* dout, const float* in,
                const float* weight, int N, int C, int OC, float beta);
  // The same for a layer whose input was gelu(pre), through the GELU: dpre = (dout weight) *
  // gelu'(pre) by cuBLASLt's DGELU epilogue (din is not formed), dweight += dout^T in first (in
  // may be dpre's memory). false, with nothing queued, where cuBLASLt has no algorithm (C not a
  // multiple of 8, unaligned rows).
  bool backward_dgelu(float* dpre, float* dweight, float* bias_partials, const float* dout, const float* in,
                      const float* pre, const float* weight, int N, int C, int OC);

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

  // Products run so far through cuBLASLt with epilogue `e` (tests ask whether a path was taken).
  std::size_t epilogue_runs(LtEpilogue e) const { return lt_.runs(e); }

  // Holds the scratch kernel_scratch sizes (exec/kernel_scratch.hpp) from now on.
  void reserve(const KernelScratch& scratch);

 private:
  // Rows of `cols` elements per piece: at least one.
  int rows_per_piece(int cols, int rows) const;
  // The backward's pieces: with column sums, whole chunks of kRowsPerChunk rows.
  int backward_rows_per_piece(int C, int OC, int N, bool chunked) const;
  // Queues one backward piece's rounding of dout (its column sums too) and its weight gradient;
  // returns the rounded rows.
  const std::uint16_t* backward_piece(float* dweight, float* bias_partials, const float* dout, const float* in,
                                      int first, int n, int C, int OC);
  const std::uint16_t* to_bf16(DeviceScratch& scratch, const float* from, std::size_t n);

  cudaStream_t stream_;
  cublasHandle_t cublas_;
  std::size_t piece_elements_;
  DeviceScratch weight_, piece_a_, piece_b_;
  LtMatmul lt_;  // the products with an epilogue
};

}  // namespace st
