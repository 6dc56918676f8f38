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
    EXPECT_NE(c.error.find("emulate nodes of at most 2 rank(s) (parallel.ranks_per_node or SHARDTRAIN_RANKS_PER_NODE)"),
              std::string::npos)
        << c.error;
  }
  // Nodes of 4 ranks, as many as the host has, are real nodes: the same refusal.
  DeviceProbe whole = probe("cuda", true, 2, 0, 4);
  whole.node_ranks = 4;
  EXPECT_FALSE(decide_device(whole, "deck.toml").error.empty());
}

TEST(DeviceChoice, EmulatedNodesShareGpusOneGpuPerRankOfANode) {
  // 4 ranks on one GPU, each its own emulated node (SHARDTRAIN_RANKS_PER_NODE=1): all on device
  // 0, each planning a quarter of its memory.
  for (int r = 0; r < 4; ++r) {
    DeviceProbe p = probe("cuda", true, 1, r, 4);
    p.node_ranks = 1;
    const DeviceChoice c = decide_device(p, "deck.toml");
    EXPECT_TRUE(c.error.empty()) << c.error;
    EXPECT_TRUE(c.cuda);
    EXPECT_EQ(c.device, 0);
    EXPECT_EQ(c.ranks_on_device, 4);
    EXPECT_NE(c.note.find("cuda device 0 of 1 visible, shared by 4 ranks of this host (emulated nodes of 1 rank(s)"),
              std::string::npos)
        << c.note;
  }
  // Nodes of 2 ranks on 2 GPUs, 4 ranks: the two ranks of each node on different GPUs.
  for (int r = 0; r < 4; ++r) {
    DeviceProbe p = probe("auto", true, 2, r, 4);
    p.node_ranks = 2;
    const DeviceChoice c = decide_device(p, "deck.toml");
    EXPECT_TRUE(c.cuda);
    EXPECT_EQ(c.device, r % 2);
    EXPECT_EQ(c.ranks_on_device, 2);
  }
  // 5 ranks of one rank each on 2 GPUs: device 0 holds ranks 0, 2, 4 and device 1 ranks 1, 3.
  for (int r = 0; r < 5; ++r) {
    DeviceProbe p = probe("cuda", true, 2, r, 5);
    p.node_ranks = 1;
    const DeviceChoice c = decide_device(p, "deck.toml");
    EXPECT_EQ(c.device, r % 2);
    EXPECT_EQ(c.ranks_on_device, r % 2 == 0 ? 3 : 2) << r;
  }
}

TEST(DeviceChoice, EmulatedNodesWiderThanTheGpusAreRefused) {
  // Nodes of 3 ranks with 2 GPUs: two ranks of one node would share a GPU, which NCCL refuses.
  DeviceProbe p = probe("cuda", true, 2, 0, 6);
  p.node_ranks = 3;
  const DeviceChoice c = decide_device(p, "deck.toml");
  EXPECT_FALSE(c.cuda);
  EXPECT_NE(c.error.find("6 ranks on this node but 2 visible CUDA device(s)"), std::string::npos) << c.error;
  EXPECT_NE(c.error.find("emulated nodes of 3 ranks (parallel.ranks_per_node) may share GPUs only with at most 2 "
                         "ranks per node"),
            std::string::npos)
      << c.error;
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
