#include "exec/gemm.hpp"

#include <cblas.h>
#include <omp.h>

#include <algorithm>

namespace st {
namespace {

// Tiles of the output: large enough that packing the operands (each tile packs its rows of A
// and its columns of B) costs little beside the tile's multiply-adds, small enough that the
// products of a layer give every thread several.
constexpr int kTile = 256;
// Rows of y per tile for a matrix-vector product (each row's dot product is one BLAS call's).
constexpr int kGemvTile = 1024;

inline void blas_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                      int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}
inline void blas_gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b,
                      int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}
inline void blas_gemv(bool ta, int m, int n, float alpha, const float* a, int lda, const float* x, float beta, float* y) {
  cblas_sgemv(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, m, n, alpha, a, lda, x, 1, beta, y, 1);
}
inline void blas_gemv(bool ta, int m, int n, double alpha, const double* a, int lda, const double* x, double beta,
                      double* y) {
  cblas_dgemv(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, m, n, alpha, a, lda, x, 1, beta, y, 1);
}

// OpenBLAS runs every call on the calling thread: the tiles are the parallelism. Its OpenMP build
// uses one thread inside a parallel region, and outside one as many as OpenMP's count says at the
// call (set with omp_set_num_threads, it follows it): outside, the count is 1 for the call.
class OneBlasThread {
 public:
  OneBlasThread() : threads_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneBlasThread() { omp_set_num_threads(threads_); }
  OneBlasThread(const OneBlasThread&) = delete;
  OneBlasThread& operator=(const OneBlasThread&) = delete;

 private:
  int threads_;
};

// Runs tile(t) for t < tiles on the OpenMP threads, each tile's BLAS call on one thread: inside
// an active parallel region (more than one thread) OpenBLAS uses one by itself; elsewhere (one
// tile, a region of one thread, a caller already inside attention's per-head region) the count
// is 1 for the call.
template <class Tile>
void for_tiles(int tiles, Tile&& tile) {
  auto one = [&](int t) {
    if (omp_in_parallel()) {
      tile(t);
    } else {
      const OneBlasThread single;
      tile(t);
    }
  };
  if (tiles == 1 || omp_in_parallel()) {
    for (int t = 0; t < tiles; ++t) one(t);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int t = 0; t < tiles; ++t) one(t);
}

template <class R>
void tiled_gemm(bool ta, bool tb, int m, int n, int k, R alpha, const R* a, int lda, const R* b, int ldb, R beta, R* c,
                int ldc) {
  const int rows = (m + kTile - 1) / kTile, cols = (n + kTile - 1) / kTile;
  for_tiles(rows * cols, [&](int t) {
    const int i = t / cols * kTile, j = t % cols * kTile;
    // Rows i.. of op(A): rows of A, or columns of A when it is transposed; columns j.. of op(B).
    const R* a_tile = ta ? a + i : a + static_cast<std::size_t>(i) * lda;
    const R* b_tile = tb ? b + static_cast<std::size_t>(j) * ldb : b + j;
    blas_gemm(ta, tb, std::min(kTile, m - i), std::min(kTile, n - j), k, alpha, a_tile, lda, b_tile, ldb, beta,
              c + static_cast<std::size_t>(i) * ldc + j, ldc);
  });
}

template <class R>
void tiled_gemv(bool ta, int m, int n, R alpha, const R* a, int lda, const R* x, R beta, R* y) {
  // y has m entries (A x) or n (A^T x); each tile is a block of them over the whole other side.
  const int out = ta ? n : m;
  for_tiles((out + kGemvTile - 1) / kGemvTile, [&](int t) {
    const int i = t * kGemvTile, count = std::min(kGemvTile, out - i);
    if (ta) blas_gemv(true, m, count, alpha, a + i, lda, x, beta, y + i);
    else blas_gemv(false, count, n, alpha, a + static_cast<std::size_t>(i) * lda, lda, x, beta, y + i);
  });
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc) {
  tiled_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a, int lda, const double* b,
          int ldb, double beta, double* c, int ldc) {
  tiled_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemv(bool trans_a, int m, int n, float alpha, const float* a, int lda, const float* x, float beta, float* y) {
  tiled_gemv(trans_a, m, n, alpha, a, lda, x, beta, y);
}
void gemv(bool trans_a, int m, int n, double alpha, const double* a, int lda, const double* x, double beta, double* y) {
  tiled_gemv(trans_a, m, n, alpha, a, lda, x, beta, y);
}

}  // namespace st
