#pragma once
// Row-major GEMM and GEMV through CBLAS, overloaded so the model's kernels are written once for float
// (training) and double (gradient checks).
#include <cblas.h>

namespace st {

inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
}

inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a, int lda,
                 const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
}

// y = alpha A x + beta y for row-major A (m x n), or A^T x with trans_a.
inline void gemv(bool trans_a, int m, int n, float alpha, const float* a, int lda, const float* x, float beta,
                 float* y) {
  cblas_sgemv(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, m, n, alpha, a, lda, x, 1, beta, y, 1);
}

inline void gemv(bool trans_a, int m, int n, double alpha, const double* a, int lda, const double* x, double beta,
                 double* y) {
  cblas_dgemv(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, m, n, alpha, a, lda, x, 1, beta, y, 1);
}

}  // namespace st
