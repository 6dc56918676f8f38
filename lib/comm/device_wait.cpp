#include "comm/device_wait.hpp"

#include "core/text.hpp"

namespace st {

std::string describe_device_collective(const char* op, std::uint64_t bytes, int rank, int size, TrafficLevel level) {
  return std::string("NCCL ") + op + " of " + format_bytes(static_cast<double>(bytes)) + " (rank " +
         std::to_string(rank) + " of " + std::to_string(size) + ", " +
         (level == TrafficLevel::intra ? "intra-node" : "inter-node") + ")";
}

std::string device_collective_failed(const std::string& collective, const std::string& nccl_error,
                                     const std::string& nccl_detail) {
  return collective + " failed while it ran: NCCL reports \"" + nccl_error + "\"" +
         (nccl_detail.empty() ? "" : " (" + nccl_detail + ")") +
         ". A peer rank has probably died or lost its connection; its own log says why. The communicator was "
         "aborted.";
}

std::string device_collective_timed_out(const std::string& collective, double waited_seconds, double limit_seconds) {
  return collective + " did not finish within " + format_fixed(waited_seconds, 0) + " s (the limit is " +
         format_fixed(limit_seconds, 0) +
         " s: parallel.collective_timeout_s plus " + format_fixed(kDeviceWaitMarginSeconds, 0) +
         " s). A peer rank never joined it or stopped inside it. The communicator was aborted.";
}

}  // namespace st
