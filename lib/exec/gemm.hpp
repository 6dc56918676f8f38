#pragma once
// Row-major GEMM and GEMV on the host, overloaded so the model's kernels are written once for
// float (training) and double (gradient checks).
//
// Their bits do not depend on the thread count. OpenBLAS splits a product between its threads by
// their number, and the sums come out different in the last bits with 2 or 3 threads than with
// one (15 of 16 of this model's shapes, seen with OpenBLAS 0.3.21). Here the output is cut into
// fixed tiles, each one single-threaded BLAS call over the whole inner dimension, and OpenMP
// threads take the tiles: an element's bits depend on its tile, which depends on the shape
// alone. So a run resumed with other threads per rank (another launcher, another node's cores)
// continues bit for bit. BLAS itself runs one thread (apply_thread_count).
namespace st {

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc);
void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a, int lda, const double* b,
          int ldb, double beta, double* c, int ldc);

// y = alpha A x + beta y for row-major A (m x n), or A^T x with trans_a.
void gemv(bool trans_a, int m, int n, float alpha, const float* a, int lda, const float* x, float beta, float* y);
void gemv(bool trans_a, int m, int n, double alpha, const double* a, int lda, const double* x, double beta, double* y);

}  // namespace st
