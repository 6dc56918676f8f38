#pragma once
namespace st {

// Measures this rank's sgemm rate in FLOP/s on an m x n x k product (best of a few runs, with
// the current thread settings): the yardstick MFU is reported against.
double measure_sgemm_flops(int m, int n, int k, double min_seconds = 0.25);

}  // namespace st
