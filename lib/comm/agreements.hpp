#pragma once
// The job's small agreements beside the data: a stop signal on any rank, the largest rank's
// memory, a background checkpoint finished everywhere, everyone at the same point. MPI calls of
// a few bytes over one communicator, watched for hangs like every collective. They must span
// every rank that goes on together: the whole job, a pipeline's stages included, not only the
// ranks one strategy shards over (train/sharded_model.hpp hands out the job's).
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>

#include "comm/watchdog.hpp"

namespace st {

class JobAgreements {
 public:
  // Over `comm`, registered with `watchdog` (another object's; null: unwatched).
  JobAgreements(MPI_Comm comm, Watchdog* watchdog) : comm_(comm), watchdog_(watchdog) {}
  // Over `comm`, with a watchdog of its own (timeout_seconds <= 0: none). Collective over comm.
  JobAgreements(MPI_Comm comm, double timeout_seconds);
  JobAgreements(const JobAgreements&) = delete;
  JobAgreements& operator=(const JobAgreements&) = delete;

  // `what` names the agreement in a hang report.
  int max_over_ranks(int value, const char* what);
  std::uint64_t max_over_ranks(std::uint64_t value, const char* what);
  void barrier(const char* what);
  // agree_or_throw (comm/agree.hpp), watched: every rank throws the first failing rank's message
  // when any rank passes one.
  void agree_or_throw(const std::string& local_error, const char* what);

 private:
  MPI_Comm comm_;
  std::unique_ptr<Watchdog> own_watchdog_;
  Watchdog* watchdog_ = nullptr;
};

}  // namespace st
