#include "exec/cuda/bf16_matmuls.hpp"

#include <algorithm>

#include "exec/cuda/bf16_bits.cuh"
#include "exec/cuda/cuda_checks.hpp"

namespace st {
namespace {

using namespace cuda_detail;

// C = alpha op(A) op(B) + beta C, column-major (as cuBLAS sees the row-major matrices: a row-major
// X[rows, cols] is the column-major X^T with leading dimension cols); A and B bf16, C fp32, or
// bf16 where c_type says so (the sum is fp32 either way, rounded once on its way out).
void gemm_bf16(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
               float alpha, const std::uint16_t* A, int lda, const std::uint16_t* B, int ldb, float beta, void* C,
               cudaDataType_t c_type, int ldc) {
  ST_CHECK_CUBLAS(cublasGemmEx(handle, transa, transb, m, n, k, &alpha, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb,
                               &beta, C, c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
void gemm_bf16(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
               const std::uint16_t* A, int lda, const std::uint16_t* B, int ldb, float beta, float* C, int ldc) {
  gemm_bf16(handle, transa, transb, m, n, k, 1.0f, A, lda, B, ldb, beta, C, CUDA_R_32F, ldc);
}

}  // namespace

int Bf16Matmuls::rows_per_piece(int cols, int rows) const {
  const std::size_t fit = piece_elements_ / static_cast<std::size_t>(std::max(cols, 1));
  return static_cast<int>(std::clamp<std::size_t>(fit, 1, static_cast<std::size_t>(std::max(rows, 1))));
}

const std::uint16_t* Bf16Matmuls::to_bf16(DeviceScratch& scratch, const float* from, std::size_t n) {
  auto* out = scratch.get<std::uint16_t>(n, stream_);
  round_to_bf16(out, from, n, stream_);
  return out;
}

void Bf16Matmuls::rows_times_weight(float* out, int out_cols, const float* rows_in, int in_cols,
                                    const float* weight, bool transpose_weight, int N, float beta) {
  if (N == 0 || out_cols == 0) return;
  const std::uint16_t* w = to_bf16(weight_, weight, std::size_t{1} * out_cols * in_cols);
  // The weight is [OC, C] row-major: C = in_cols when it is transposed (the forward), out_cols not.
  const int weight_row = transpose_weight ? in_cols : out_cols;
  const int rows = rows_per_piece(in_cols, N);
  for (int first = 0; first < N; first += rows) {
    const int n = std::min(rows, N - first);
    const std::uint16_t* x = to_bf16(piece_a_, rows_in + std::size_t{1} * first * in_cols, std::size_t{1} * n * in_cols);
    // out^T[out_cols, n] = op(W) rows_in^T[in_cols, n]
    gemm_bf16(cublas_, transpose_weight ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, out_cols, n, in_cols, w, weight_row,
              x, in_cols, beta, out + std::size_t{1} * first * out_cols, out_cols);
  }
}

void Bf16Matmuls::forward(float* out, const float* in, const float* weight, int N, int C, int OC, float beta) {
  rows_times_weight(out, OC, in, C, weight, true, N, beta);  // out = in W^T
}

void Bf16Matmuls::input_gradient(float* din, const float* dout, const float* weight, int N, int C, int OC,
                                 float beta) {
  rows_times_weight(din, C, dout, OC, weight, false, N, beta);  // din = dout W
}

void Bf16Matmuls::weight_gradient(float* dweight, const float* dout, const float* in, int N, int C, int OC) {
  if (N == 0 || C == 0 || OC == 0) return;
  const int rows = rows_per_piece(std::max(C, OC), N);
  for (int first = 0; first < N; first += rows) {
    const int n = std::min(rows, N - first);
    const std::uint16_t* x = to_bf16(piece_a_, in + std::size_t{1} * first * C, std::size_t{1} * n * C);
    const std::uint16_t* g = to_bf16(piece_b_, dout + std::size_t{1} * first * OC, std::size_t{1} * n * OC);
    // dW^T[C, OC] += in^T[C, n] dout[n, OC]
    gemm_bf16(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, n, x, C, g, OC, 1.0f, dweight, C);
  }
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
