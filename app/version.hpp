#pragma once
// What `shardtrain --version` prints: the version, the commit it was built from, the compiler,
// and the libraries it runs with (MPI, HDF5, BLAS, and CUDA and NCCL where built in).
#include <string>

namespace st::app {

std::string version_text();

}  // namespace st::app
