#pragma once
// GEMM wrappers over cuBLAS (column-major, as cuBLAS sees matrices), fp32 in and out.
// `bf16` selects CUBLAS_COMPUTE_32F_FAST_16BF, which lets cuBLAS use the tensor cores at bf16's
// precision or better (on an H200 it ran TF32 kernels); otherwise CUBLAS_COMPUTE_32F (plain fp32,
// no TF32). Both are queued on the stream the handle is bound to. The linear layers' bf16
// products round their operands to bf16 themselves (bf16_matmuls.hpp).
#include <cublas_v2.h>

namespace st {

// C = alpha op(A) op(B) + beta C, column-major, C is m x n, op(A) m x k, op(B) k x n.
void cuda_gemm(cublasHandle_t handle, bool bf16, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
               int k, float alpha, const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc);

// `batch` such products, matrix i starting `stride_*` elements after matrix i-1.
void cuda_gemm_strided_batched(cublasHandle_t handle, bool bf16, cublasOperation_t transa, cublasOperation_t transb,
                               int m, int n, int k, float alpha, const float* A, int lda, long long stride_a,
                               const float* B, int ldb, long long stride_b, float beta, float* C, int ldc,
                               long long stride_c, int batch);

// C = alpha op(A) op(B) + beta C with A and B bf16 (as they are in memory), the sum in fp32, C
// fp32 (CUDA_R_32F) or bf16 (CUDA_R_16BF: the fp32 sum, beta C included, rounded once by the
// product's write).
void cuda_gemm_bf16(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                    float alpha, const void* A, int lda, const void* B, int ldb, float beta, void* C,
                    cudaDataType_t c_type, int ldc);

}  // namespace st
