#include "app/version.hpp"

#include <hdf5.h>

#include <algorithm>

#include "comm/mpi_library.hpp"
#include "runtime/make_exec.hpp"
#include "train/blas_kernel.hpp"

namespace st::app {

std::string version_text() {
  std::string mpi = mpi_library_name_if_running();
  if (mpi.empty()) mpi = "(MPI not initialised)";
  unsigned major = 0, minor = 0, release = 0;
  std::string hdf5 = "HDF5 (version unknown)";
  if (H5get_libversion(&major, &minor, &release) >= 0)
    hdf5 = "HDF5 " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release) +
           " (parallel)";
  std::string text = std::string("shardtrain ") + ST_VERSION + " (commit " + ST_GIT_COMMIT + ")\n";
  text += std::string("compiler: ") + ST_COMPILER + "\n";
  text += "MPI: " + mpi + "\n";
  text += hdf5 + "\n";
  text += "BLAS: " + blas_description() + "\n";
  text += "GPU: " + gpu_backend_versions();  // CLI11 ends the line
  return text;
}

}  // namespace st::app
