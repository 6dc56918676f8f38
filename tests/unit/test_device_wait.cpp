// A device communicator's wait (comm/device_wait.hpp): its limit follows the job's collective
// timeout, later than the hang watchdog's, and its messages name the collective and the cause.
#include <gtest/gtest.h>

#include "comm/device_wait.hpp"

namespace st {
namespace {

TEST(DeviceWait, LimitComesAfterTheWatchdogsAndNoneWithoutATimeout) {
  EXPECT_DOUBLE_EQ(device_wait_limit(300), 330);
  EXPECT_DOUBLE_EQ(device_wait_limit(5), 35);
  EXPECT_DOUBLE_EQ(device_wait_limit(0), 0) << "collective_timeout_s = 0 turns both off";
}

TEST(DeviceWait, MessagesNameTheCollectiveAndTheCause) {
  const std::string what = describe_device_collective("all_reduce", std::uint64_t{4} << 20, 1, 2, TrafficLevel::intra);
  EXPECT_EQ(what, "NCCL all_reduce of 4.00 MiB (rank 1 of 2, intra-node)");
  EXPECT_EQ(describe_device_collective("all_gather", 100, 0, 8, TrafficLevel::inter),
            "NCCL all_gather of 100 B (rank 0 of 8, inter-node)");
  const std::string failed = device_collective_failed(what, "remote process exited or there was a network error",
                                                      "socketProgress: Connection closed by remote peer");
  EXPECT_EQ(failed.rfind(what + " failed while it ran: NCCL reports \"remote process exited", 0), 0u) << failed;
  EXPECT_NE(failed.find("(socketProgress: Connection closed by remote peer)"), std::string::npos) << failed;
  EXPECT_NE(failed.find("aborted"), std::string::npos) << failed;
  EXPECT_EQ(device_collective_failed(what, "unhandled system error", "").find("()"), std::string::npos);
  const std::string late = device_collective_timed_out(what, 330.4, 330);
  EXPECT_EQ(late.rfind(what + " did not finish within 330 s (the limit is 330 s: parallel.collective_timeout_s plus 30 s)",
                       0),
            0u)
      << late;
}

}  // namespace
}  // namespace st
