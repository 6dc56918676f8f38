#pragma once
// What the MPI library under the job is: for `shardtrain --version` and `shardtrain doctor`.
#include <string>

namespace st {

struct MpiLibrary {
  std::string name;  // the library and its version, without its build notes ("Open MPI v4.1.4")
  int major = 0, minor = 0;  // the MPI standard it implements
  int thread_level = 0;      // as MPI_Query_thread gives it
  bool threaded = false;     // at least MPI_THREAD_SERIALIZED: what the progress thread needs
};
// Checked calls: MPI must be running.
MpiLibrary describe_mpi_library();

// The library's name as above, or "" when MPI is not running or cannot say (never throws).
std::string mpi_library_name_if_running();

// What the library is told to use between processes, in one phrase ("Open MPI pml ob1, btl
// tcp,self"), read through the MPI tool interface; says so where that is unavailable.
std::string mpi_transport_settings();

}  // namespace st
