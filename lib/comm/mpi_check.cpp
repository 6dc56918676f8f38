#include "comm/mpi_check.hpp"

#include <mpi.h>

namespace st {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "code " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

void fail_mpi_call(int code, const char* call, const char* file, int line) {
  throw Error(std::string("MPI call failed: ") + call + ": " + mpi_error_text(code) + " at " + call_site(file, line));
}

}  // namespace st
