#include "core/error.hpp"

#include <mpi.h>

#include <sstream>

namespace st {
namespace {

std::string where(const char* file, int line) {
  std::ostringstream os;
  os << file << ":" << line;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    os << " (rank " << rank << ")";
  }
  return os.str();
}

}  // namespace

void fail_mpi_call(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) std::snprintf(text, sizeof text, "code %d", code);
  throw Error(std::string("MPI call failed: ") + call + ": " + text + " at " + where(file, line));
}

void fail_call(const char* library, long code, const char* call, const char* file, int line) {
  std::ostringstream os;
  os << library << " call failed (code " << code << "): " << call << " at " << where(file, line);
  throw Error(os.str());
}

void fail_requirement(const std::string& message, const char* condition, const char* file, int line) {
  throw Error(message + " [" + condition + " failed at " + where(file, line) + "]");
}

}  // namespace st
