#pragma once
// The one error type of the library, and the checked-call macros that produce it (MPI's, ST_CHECK_MPI,
// live in comm/mpi_check.hpp: the MPI library is the communication layer's).
#include <stdexcept>
#include <string>

namespace st {

// Who saw the error decides how the job ends: an error every rank raises identically (a bad
// deck, parsed the same everywhere) lets all ranks exit cleanly; an error one rank raises on
// its own must abort the job so no other rank waits forever in a collective.
enum class ErrorScope { all_ranks, this_rank };

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, ErrorScope scope = ErrorScope::this_rank)
      : std::runtime_error(what), scope_(scope) {}
  ErrorScope scope() const noexcept { return scope_; }

 private:
  ErrorScope scope_;
};

// Exit codes documented in the README.
inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 2;    // bad command line or deck (every rank agrees)
inline constexpr int kExitFailure = 1;  // a rank failed at run time
inline constexpr int kExitStopped = 4;  // SIGUSR1/SIGTERM: a checkpoint was written, then the job stopped
inline constexpr int kExitAborted = 5;  // a second signal, or a checkpoint that overran checkpoint.timeout_s
inline constexpr int kExitDiverged = 6;  // a loss or gradient norm not finite: the step before was checkpointed

[[noreturn]] void fail_call(const char* library, long code, const char* call, const char* file, int line);
[[noreturn]] void fail_requirement(const std::string& message, const char* condition, const char* file,
                                   int line);

// "file:line", with " (rank R)" while MPI runs: where a checked call failed. The rank comes from
// set_rank_for_messages (comm/world.hpp's MpiSession sets it), as core itself knows no MPI.
std::string call_site(const char* file, int line);
// The rank named in error messages from now on; a negative one names none (MPI not running).
void set_rank_for_messages(int rank);

// HDF5 returns a negative herr_t/hid_t on failure.
template <class Code>
inline Code check_hdf5(Code code, const char* call, const char* file, int line) {
  if (code < 0) fail_call("HDF5", static_cast<long>(code), call, file, line);
  return code;
}

}  // namespace st

#define ST_CHECK_HDF5(call) ::st::check_hdf5((call), #call, __FILE__, __LINE__)
// A precondition of the program's own: it fails with a message instead of crashing.
#define ST_REQUIRE(cond, msg)                                              \
  do {                                                                     \
    if (!(cond)) ::st::fail_requirement((msg), #cond, __FILE__, __LINE__); \
  } while (0)
