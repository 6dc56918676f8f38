#pragma once
// The checked MPI call. Every MPI function the project calls goes through ST_CHECK_MPI, which
// throws an Error naming the call, file:line and rank; MPI's error handler is set to
// MPI_ERRORS_RETURN on our communicators so that it fires instead of MPI aborting on its own.
#include <string>

#include "core/error.hpp"

namespace st {

[[noreturn]] void fail_mpi_call(int code, const char* call, const char* file, int line);

inline void check_mpi(int code, const char* call, const char* file, int line) {
  if (code != 0) fail_mpi_call(code, call, file, line);
}

// MPI's own words for an error code ("code N" where it has none).
std::string mpi_error_text(int code);

}  // namespace st

#define ST_CHECK_MPI(call) ::st::check_mpi((call), #call, __FILE__, __LINE__)
