// parallel.device: the decision each rank makes from what it sees, without a GPU.
#include <gtest/gtest.h>

#include "runtime/device_choice.hpp"

namespace st {
namespace {

DeviceProbe probe(const char* requested, bool built, int devices, int host_rank, int host_ranks) {
  DeviceProbe p;
  p.requested = *choice_from_name<DeviceKind>(requested);
  p.cuda_built = built;
  p.visible_devices = devices;
  p.why_none = devices == 0 ? "CUDA driver version is insufficient for CUDA runtime version" : "";
  p.host_rank = host_rank;
  p.host_ranks = host_ranks;
  return p;
}

TEST(DeviceChoice, CpuIsAlwaysTheCpu) {
  const DeviceChoice c = decide_device(probe("cpu", true, 8, 3, 8), "deck.toml");
  EXPECT_FALSE(c.cuda);
  EXPECT_TRUE(c.error.empty());
}

TEST(DeviceChoice, CudaTakesTheGpuOfTheRanksPlaceOnItsNode) {
  for (int r = 0; r < 4; ++r) {
    const DeviceChoice c = decide_device(probe("cuda", true, 4, r, 4), "deck.toml");
    EXPECT_TRUE(c.cuda);
    EXPECT_EQ(c.device, r);
    EXPECT_TRUE(c.error.empty());
  }
  const DeviceChoice a = decide_device(probe("auto", true, 8, 1, 2), "deck.toml");
  EXPECT_TRUE(a.cuda);
  EXPECT_EQ(a.device, 1);
  EXPECT_NE(a.note.find("cuda device 1 of 8"), std::string::npos) << a.note;
}

TEST(DeviceChoice, CudaWithoutAGpuIsRefusedWithTheDriversReason) {
  const DeviceChoice c = decide_device(probe("cuda", true, 0, 0, 1), "deck.toml");
  EXPECT_FALSE(c.cuda);
  EXPECT_NE(c.error.find("deck.toml: parallel.device = \"cuda\" but no CUDA device is usable on this node: CUDA "
                         "driver version is insufficient for CUDA runtime version"),
            std::string::npos)
      << c.error;
  EXPECT_NE(c.error.find("set parallel.device = \"cpu\""), std::string::npos) << c.error;
}

TEST(DeviceChoice, AutoWithoutAGpuRunsOnTheCpuAndSaysWhy) {
  const DeviceChoice c = decide_device(probe("auto", true, 0, 0, 2), "deck.toml");
  EXPECT_FALSE(c.cuda);
  EXPECT_TRUE(c.error.empty());
  EXPECT_NE(c.note.find("no usable CUDA device: CUDA driver version is insufficient"), std::string::npos) << c.note;
  const DeviceChoice unbuilt = decide_device(probe("auto", false, 0, 0, 2), "deck.toml");
  EXPECT_FALSE(unbuilt.cuda);
  EXPECT_NE(unbuilt.note.find("this build has no CUDA support"), std::string::npos) << unbuilt.note;
}

TEST(DeviceChoice, MoreRanksOnANodeThanGpusIsRefused) {
  for (const char* requested : {"cuda", "auto"}) {
    const DeviceChoice c = decide_device(probe(requested, true, 2, 0, 4), "deck.toml");
    EXPECT_FALSE(c.cuda);
    EXPECT_NE(c.error.find("4 ranks on this node but 2 visible CUDA device(s); start one rank per GPU"),
              std::string::npos)
        << c.error;
    EXPECT_NE(c.error.find("--ntasks-per-node=2"), std::string::npos) << c.error;
  }
}

TEST(DeviceChoice, ARankGivenItsOwnGpuByTheLauncherTakesIt) {
  // srun --gpus-per-task=1: 4 ranks on the node, each sees one GPU, all different.
  DeviceProbe p = probe("cuda", true, 1, 3, 4);
  p.own_gpu_each = true;
  const DeviceChoice c = decide_device(p, "deck.toml");
  EXPECT_TRUE(c.cuda);
  EXPECT_EQ(c.device, 0);
  EXPECT_TRUE(c.error.empty()) << c.error;
  // The same GPU seen by every rank is sharing, and refused.
  p.own_gpu_each = false;
  EXPECT_FALSE(decide_device(p, "deck.toml").error.empty());
}

TEST(DeviceChoice, CudaInABuildWithoutCudaSaysHowToBuildIt) {
  const DeviceChoice c = decide_device(probe("cuda", false, 0, 0, 1), "deck.toml");
  EXPECT_NE(c.error.find("this build of shardtrain has no CUDA support; rebuild with tools/build.sh build-cuda "
                         "-DST_ENABLE_CUDA=ON"),
            std::string::npos)
      << c.error;
}

}  // namespace
}  // namespace st
