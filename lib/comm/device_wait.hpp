#pragma once
// How a device communicator waits for a collective it queued (comm/nccl_communicator.cpp): it
// polls the stream and NCCL's asynchronous error, so that a peer that died (a closed
// connection, a failed rank) ends the wait at once with NCCL's reason, and a collective that
// never finishes ends it at a limit, each with a message that names the collective. Here
// without NCCL, so the CPU tests check the limit and the messages.
#include <cstdint>
#include <string>

#include "comm/communicator.hpp"

namespace st {

// The hang watchdog (comm/watchdog.hpp) fires at the job's collective timeout and asks every
// rank where it waits; the device wait's own limit comes this much later, for a rank whose
// watchdog could not end the job.
inline constexpr double kDeviceWaitMarginSeconds = 30;

// The device wait's limit for a job's parallel.collective_timeout_s; 0 (no limit) where the job
// has none.
inline double device_wait_limit(double collective_timeout_s) {
  return collective_timeout_s > 0 ? collective_timeout_s + kDeviceWaitMarginSeconds : 0.0;
}

// What a collective is, for the messages: "NCCL all_reduce of 4.0 MiB (rank 1 of 2, intra-node)".
std::string describe_device_collective(const char* op, std::uint64_t bytes, int rank, int size, TrafficLevel level);
// The wait ended because NCCL reported an asynchronous error (its name and last message).
std::string device_collective_failed(const std::string& collective, const std::string& nccl_error,
                                     const std::string& nccl_detail);
// The wait ended at its limit.
std::string device_collective_timed_out(const std::string& collective, double waited_seconds, double limit_seconds);

}  // namespace st
