#include "exec/cuda/cuda_gemm.hpp"

#include "exec/cuda/cuda_checks.hpp"

namespace st {
namespace {
cublasComputeType_t compute_type(bool bf16) { return bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F; }
}  // namespace

void cuda_gemm(cublasHandle_t handle, bool bf16, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
               int k, float alpha, const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  if (m == 0 || n == 0) return;
  ST_CHECK_CUBLAS(cublasGemmEx(handle, transa, transb, m, n, k, &alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, &beta,
                               C, CUDA_R_32F, ldc, compute_type(bf16), CUBLAS_GEMM_DEFAULT));
}

void cuda_gemm_strided_batched(cublasHandle_t handle, bool bf16, cublasOperation_t transa, cublasOperation_t transb,
                               int m, int n, int k, float alpha, const float* A, int lda, long long stride_a,
                               const float* B, int ldb, long long stride_b, float beta, float* C, int ldc,
                               long long stride_c, int batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  ST_CHECK_CUBLAS(cublasGemmStridedBatchedEx(handle, transa, transb, m, n, k, &alpha, A, CUDA_R_32F, lda, stride_a, B,
                                             CUDA_R_32F, ldb, stride_b, &beta, C, CUDA_R_32F, ldc, stride_c, batch,
                                             compute_type(bf16), CUBLAS_GEMM_DEFAULT));
}

void cuda_gemm_bf16(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                    float alpha, const void* A, int lda, const void* B, int ldb, float beta, void* C,
                    cudaDataType_t c_type, int ldc) {
  if (m == 0 || n == 0) return;
  ST_CHECK_CUBLAS(cublasGemmEx(handle, transa, transb, m, n, k, &alpha, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb,
                               &beta, C, c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace st
