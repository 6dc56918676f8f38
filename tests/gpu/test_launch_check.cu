// parallel.sync_every_launch (exec/cuda/cuda_checks.hpp): a kernel that fails while it runs is
// named at its own launch when every launch is waited for, and is not without it (the launch
// returns before the kernel runs, and the error surfaces at a later call). A trap leaves the CUDA
// context unusable, so each case runs in a process of its own (two ctest entries, by filter).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "exec/cuda/cuda_checks.hpp"

namespace st {
namespace {

// Spins long enough (~50 ms on any GPU) that an unsynchronised check runs before the trap.
__global__ void trap_after_a_while(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  __trap();
}

void launch_the_failing_kernel() {
  trap_after_a_while<<<1, 1>>>(100'000'000LL);
}

class LaunchCheck : public ::testing::Test {
  void SetUp() override {
    int devices = 0;
    const cudaError_t code = cudaGetDeviceCount(&devices);
    if (code != cudaSuccess) GTEST_SKIP() << "no usable CUDA device: " << cudaGetErrorString(code);
    if (devices == 0) GTEST_SKIP() << "no usable CUDA device: none visible";
  }
};

TEST_F(LaunchCheck, SyncedNamesTheFailingKernelsLaunch) {
  sync_every_launch(true);
  launch_the_failing_kernel();
  const int launch_line = __LINE__ + 2;
  try {
    ST_CHECK_LAUNCH();
    FAIL() << "the trapped kernel was not reported at its launch";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("test_launch_check.cu:" + std::to_string(launch_line)), std::string::npos) << message;
    EXPECT_NE(message.find("parallel.sync_every_launch"), std::string::npos) << message;
  }
}

TEST_F(LaunchCheck, UnsyncedLaunchReturnsAndTheErrorComesLater) {
  ASSERT_FALSE(syncing_every_launch());
  launch_the_failing_kernel();
  EXPECT_NO_THROW(ST_CHECK_LAUNCH());
  EXPECT_NE(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace st
