#include "comm/agreements.hpp"

#include "comm/agree.hpp"
#include "comm/mpi_check.hpp"

namespace st {

JobAgreements::JobAgreements(MPI_Comm comm, double timeout_seconds)
    : comm_(comm), own_watchdog_(std::make_unique<Watchdog>(comm, timeout_seconds)), watchdog_(own_watchdog_.get()) {}

int JobAgreements::max_over_ranks(int value, const char* what) {
  Watchdog::Scope scope(watchdog_, "all_reduce", sizeof value, what);
  ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_MAX, comm_));
  return value;
}

std::uint64_t JobAgreements::max_over_ranks(std::uint64_t value, const char* what) {
  Watchdog::Scope scope(watchdog_, "all_reduce", sizeof value, what);
  unsigned long long v = value;
  ST_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm_));
  return v;
}

void JobAgreements::barrier(const char* what) {
  Watchdog::Scope scope(watchdog_, "barrier", 0, what);
  ST_CHECK_MPI(MPI_Barrier(comm_));
}

void JobAgreements::agree_or_throw(const std::string& local_error, const char* what) {
  Watchdog::Scope scope(watchdog_, "agree", 0, what);
  ::st::agree_or_throw(comm_, local_error);
}

}  // namespace st
