#pragma once
#include <string>

namespace st {

// "OpenBLAS 0.3.21 ... (OpenMP threading)": which BLAS the run uses and how it threads. A BLAS
// with its own thread pool would oversubscribe the cores inside OpenMP regions.
std::string blas_description();

// Measures this rank's sgemm rate in FLOP/s on an m x n x k product (best of a few runs, with
// the current thread settings): the yardstick MFU is reported against.
double measure_sgemm_flops(int m, int n, int k, double min_seconds = 0.25);

}  // namespace st
