#pragma once
// Which BLAS the ranks use, and whether they picked the same kernel (the settings table, doctor).
#include <mpi.h>

#include <string>

namespace st {

// "OpenBLAS 0.3.21 ... Prescott ..., kernel Cooperlake (OpenMP threading)": which BLAS the run
// uses, the kernel it picked for this CPU and how it threads. A BLAS with its own thread pool
// would oversubscribe the cores inside OpenMP regions.
std::string blas_description();

// When the ranks' BLAS picked different kernels (nodes of other CPUs, or OPENBLAS_CORETYPE set on
// some and not others): "ranks use different BLAS kernels: Haswell on ranks 0-1, SkylakeX on
// ranks 2-3 ...", which says what follows and what to do; "" when every rank uses the same.
// Each kernel sums a product in its own order, so where a rank runs would change the run's last
// bits. Collective.
std::string blas_kernel_mismatch(MPI_Comm comm);

}  // namespace st
