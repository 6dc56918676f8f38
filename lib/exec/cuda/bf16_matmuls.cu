#include "exec/cuda/bf16_matmuls.hpp"

#include <algorithm>

#include "exec/cuda/bf16_bits.cuh"
#include "exec/cuda/cuda_checks.hpp"
#include "exec/cuda/cuda_gemm.hpp"
#include "exec/cuda/device_reduce.cuh"
#include "exec/cuda/row_ops.cuh"

namespace st {
namespace {

using namespace cuda_detail;

// C = alpha op(A) op(B) + beta C, column-major (as cuBLAS sees the row-major matrices: a row-major
// X[rows, cols] is the column-major X^T with leading dimension cols); A and B bf16, C fp32, or
// bf16 where c_type says so (the sum is fp32 either way, rounded once on its way out).
void gemm_bf16(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
               float alpha, const std::uint16_t* A, int lda, const std::uint16_t* B, int ldb, float beta, void* C,
               cudaDataType_t c_type, int ldc) {
  cuda_gemm_bf16(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, c_type, ldc);
}
void gemm_bf16(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
               const std::uint16_t* A, int lda, const std::uint16_t* B, int ldb, float beta, float* C, int ldc) {
  gemm_bf16(handle, transa, transb, m, n, k, 1.0f, A, lda, B, ldb, beta, C, CUDA_R_32F, ldc);
}

}  // namespace

int Bf16Matmuls::rows_per_piece(int cols, int rows) const {
  return matmul_rows_per_piece(piece_elements_, cols, rows);
}

const std::uint16_t* Bf16Matmuls::to_bf16(DeviceScratch& scratch, const float* from, std::size_t n) {
  auto* out = scratch.get<std::uint16_t>(n, stream_);
  round_to_bf16(out, from, n, stream_);
  return out;
}

void Bf16Matmuls::reserve(const KernelScratch& scratch) {
  weight_.reserve(scratch.matmul_weight, stream_);
  piece_a_.reserve(scratch.matmul_rows_in, stream_);
  piece_b_.reserve(scratch.matmul_rows_out, stream_);
  lt_.reserve_workspace(scratch.lt_workspace);
}

void Bf16Matmuls::forward(float* out, const float* in, const float* weight, const float* bias, int N, int C, int OC) {
  if (N == 0 || OC == 0) return;
  const std::uint16_t* w = to_bf16(weight_, weight, std::size_t{1} * OC * C);
  const int rows = rows_per_piece(C, N);
  for (int first = 0; first < N; first += rows) {
    const int n = std::min(rows, N - first);
    const std::uint16_t* x = to_bf16(piece_a_, in + std::size_t{1} * first * C, std::size_t{1} * n * C);
    float* piece = out + std::size_t{1} * first * OC;
    // out^T[OC, n] = W[OC, C] in^T[C, n] (+ bias on every column)
    const LtProduct with_bias{CUBLAS_OP_T, CUBLAS_OP_N, OC, n, C, w, C, x, C, piece, LtEpilogue::bias, bias, nullptr};
    if (bias && lt_.supports(with_bias)) {
      lt_.run(with_bias);
      continue;
    }
    if (bias) broadcast_rows(piece, bias, n, OC, stream_);
    gemm_bf16(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, OC, n, C, w, C, x, C, bias ? 1.0f : 0.0f, piece, OC);
  }
}

bool Bf16Matmuls::forward_gelu(float* out, float* pre, const float* in, const float* weight, const float* bias, int N,
                               int C, int OC) {
  if (N == 0 || OC == 0 || C == 0 || !bias) return false;
  const std::size_t weight_size = std::size_t{1} * OC * C;
  auto* w = weight_.get<std::uint16_t>(weight_size, stream_);
  const int rows = rows_per_piece(C, N);
  auto* x = piece_a_.get<std::uint16_t>(std::size_t{1} * std::min(rows, N) * C, stream_);
  auto product = [&](int first) {
    const int n = std::min(rows, N - first);
    const std::size_t at = std::size_t{1} * first * OC;
    // out^T[OC, n] = gelu(W[OC, C] in^T[C, n] + bias), pre^T the argument
    return LtProduct{CUBLAS_OP_T, CUBLAS_OP_N, OC, n, C, w, C, x, C, out + at, LtEpilogue::gelu_aux_bias, bias,
                     pre + at};
  };
  for (int first = 0; first < N; first += rows)
    if (!lt_.supports(product(first))) return false;  // before anything is queued
  round_to_bf16(w, weight, weight_size, stream_);
  for (int first = 0; first < N; first += rows) {
    const int n = std::min(rows, N - first);
    round_to_bf16(x, in + std::size_t{1} * first * C, std::size_t{1} * n * C, stream_);
    lt_.run(product(first));
  }
  return true;
}

int Bf16Matmuls::backward_rows_per_piece(int C, int OC, int N, bool chunked) const {
  return matmul_backward_rows_per_piece(piece_elements_, C, OC, N, chunked);
}

const std::uint16_t* Bf16Matmuls::backward_piece(float* dweight, float* bias_partials, const float* dout,
                                                 const float* in, int first, int n, int C, int OC) {
  auto* g = piece_b_.get<std::uint16_t>(std::size_t{1} * n * OC, stream_);
  const float* rows = dout + std::size_t{1} * first * OC;
  if (bias_partials)
    round_rows_to_bf16(g, bias_partials + std::size_t{1} * (first / kRowsPerChunk) * OC, rows, n, OC, stream_);
  else
    round_to_bf16(g, rows, std::size_t{1} * n * OC, stream_);
  if (C == 0) return g;
  const std::uint16_t* x = to_bf16(piece_a_, in + std::size_t{1} * first * C, std::size_t{1} * n * C);
  // dW^T[C, OC] += in^T[C, n] dout[n, OC]
  gemm_bf16(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, n, x, C, g, OC, 1.0f, dweight, C);
  return g;
}

void Bf16Matmuls::backward(float* din, float* dweight, float* bias_partials, const float* dout, const float* in,
                           const float* weight, int N, int C, int OC, float beta) {
  if (N == 0) return;
  if (OC == 0) {  // an empty product: din = beta din
    if (beta == 0.0f && C > 0) ST_CHECK_CUDA(cudaMemsetAsync(din, 0, std::size_t{1} * N * C * sizeof(float), stream_));
    return;
  }
  const std::uint16_t* w = C > 0 ? to_bf16(weight_, weight, std::size_t{1} * OC * C) : nullptr;
  const int rows = backward_rows_per_piece(C, OC, N, bias_partials != nullptr);
  for (int first = 0; first < N; first += rows) {
    const int n = std::min(rows, N - first);
    const std::uint16_t* g = backward_piece(dweight, bias_partials, dout, in, first, n, C, OC);
    if (C == 0) continue;
    // din^T[C, n] = W^T[C, OC] dout^T[OC, n] + beta din^T
    gemm_bf16(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, C, n, OC, w, C, g, OC, beta, din + std::size_t{1} * first * C, C);
  }
}

bool Bf16Matmuls::backward_dgelu(float* dpre, float* dweight, float* bias_partials, const float* dout,
                                 const float* in, const float* pre, const float* weight, int N, int C, int OC) {
  if (N == 0 || OC == 0 || C == 0) return false;
  const std::size_t weight_size = std::size_t{1} * OC * C;
  auto* w = weight_.get<std::uint16_t>(weight_size, stream_);
  const int rows = backward_rows_per_piece(C, OC, N, bias_partials != nullptr);
  auto* g = piece_b_.get<std::uint16_t>(std::size_t{1} * std::min(rows, N) * OC, stream_);
  auto product = [&](int first) {
    const int n = std::min(rows, N - first);
    const std::size_t at = std::size_t{1} * first * C;
    // dpre^T[C, n] = (W^T[C, OC] dout^T[OC, n]) * gelu'(pre^T)
    return LtProduct{CUBLAS_OP_N, CUBLAS_OP_N, C, n, OC, w, C, g, OC, dpre + at, LtEpilogue::dgelu, nullptr,
                     const_cast<float*>(pre + at)};
  };
  for (int first = 0; first < N; first += rows)
    if (!lt_.supports(product(first))) return false;  // before anything is queued
  round_to_bf16(w, weight, weight_size, stream_);
  for (int first = 0; first < N; first += rows) {
    const int n = std::min(rows, N - first);
    // The weight's gradient reads in's rows (rounded into scratch) before dpre is written.
    ST_REQUIRE(backward_piece(dweight, bias_partials, dout, in, first, n, C, OC) == g, "backward scratch moved");
    lt_.run(product(first));
  }
  return true;
}

void Bf16Matmuls::forward_to_bf16(std::uint16_t* out, const float* in, const float* weight, int N, int C, int OC) {
  if (N == 0 || OC == 0) return;
  const std::uint16_t* w = to_bf16(weight_, weight, std::size_t{1} * OC * C);
  const int rows = rows_per_piece(C, N);
  for (int first = 0; first < N; first += rows) {
    const int n = std::min(rows, N - first);
    const std::uint16_t* x = to_bf16(piece_a_, in + std::size_t{1} * first * C, std::size_t{1} * n * C);
    // out^T[OC, n] = W[OC, C] in^T[C, n]
    gemm_bf16(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, OC, n, C, 1.0f, w, C, x, C, 0.0f, out + std::size_t{1} * first * OC,
              CUDA_R_16BF, OC);
  }
}

void Bf16Matmuls::input_gradient_from_bf16(float* din, const std::uint16_t* dout, const float* weight, int N, int C,
                                           int OC, float alpha) {
  if (N == 0 || C == 0) return;
  const std::uint16_t* w = to_bf16(weight_, weight, std::size_t{1} * OC * C);
  // din^T[C, N] = alpha W^T[C, OC] dout^T[OC, N]: one product, dout needing no scratch.
  gemm_bf16(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, alpha, w, C, dout, OC, 0.0f, din, CUDA_R_32F, C);
}

void Bf16Matmuls::weight_gradient_from_bf16(float* dweight, const std::uint16_t* dout, const float* in, int N, int C,
                                            int OC, float alpha) {
  if (N == 0 || C == 0 || OC == 0) return;
  const int rows = rows_per_piece(C, N);
  for (int first = 0; first < N; first += rows) {
    const int n = std::min(rows, N - first);
    const std::uint16_t* x = to_bf16(piece_a_, in + std::size_t{1} * first * C, std::size_t{1} * n * C);
    // dW^T[C, OC] += alpha in^T[C, n] dout[n, OC]
    gemm_bf16(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, n, alpha, x, C, dout + std::size_t{1} * first * OC, OC, 1.0f,
              dweight, CUDA_R_32F, C);
  }
}

}  // namespace st
