#pragma once
// How fast this rank multiplies matrices on the host (exec/gemm.hpp's products): the planner's
// compute rate, MFU's yardstick and doctor's check that ranks do not share cores.

namespace st {

// Measures this rank's sgemm rate in FLOP/s on an m x n x k product (the best of at least five
// runs over at least min_seconds, with the current thread settings): the yardstick MFU is
// reported against.
double measure_sgemm_flops(int m, int n, int k, double min_seconds = 0.5);
// This rank's sgemm rate in FLOP/s sustained over `seconds`: every product in that time counts,
// not the best one, so a rank that shares its CPUs with another gets its share of them.
double measure_sgemm_throughput(int m, int n, int k, double seconds);

}  // namespace st
