#include "app/version.hpp"

#include <hdf5.h>
#include <mpi.h>

#include <algorithm>

#include "exec/make_exec.hpp"
#include "train/blas_kernel.hpp"

namespace st::app {

std::string version_text() {
  std::string mpi = "(MPI not initialised)";
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    if (MPI_Get_library_version(text, &length) == MPI_SUCCESS) {
      mpi.assign(text, static_cast<std::size_t>(length));
      mpi = mpi.substr(0, mpi.find_first_of(",\n"));  // the library and its version, not its build notes
    }
  }
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
