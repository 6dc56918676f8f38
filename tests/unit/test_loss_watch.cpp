// Divergence: a step whose loss or gradient norm is not finite, and a loss far above its recent
// average.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "train/loss_watch.hpp"

namespace st {
namespace {

TEST(LossWatch, NotFiniteLossOrNormIsNamed) {
  LossWatch watch;
  EXPECT_TRUE(watch.observe(2.0, 1.0).finite);
  const LossWatch::Verdict nan_loss = watch.observe(std::nan(""), 1.0);
  EXPECT_FALSE(nan_loss.finite);
  EXPECT_NE(nan_loss.warning.find("loss nan"), std::string::npos) << nan_loss.warning;
  const LossWatch::Verdict inf_norm = watch.observe(2.0, std::numeric_limits<double>::infinity());
  EXPECT_FALSE(inf_norm.finite);
  EXPECT_NE(inf_norm.warning.find("gradient norm inf"), std::string::npos) << inf_norm.warning;
}

TEST(LossWatch, SpikeAgainstTheMeanOfTheLastTwentySteps) {
  LossWatch watch;
  // Until the window is full nothing is a spike, however large.
  for (int i = 0; i < 19; ++i) EXPECT_EQ(watch.observe(i == 10 ? 50.0 : 2.0, 1.0).spike_ratio, 0.0);
  EXPECT_EQ(watch.observe(2.0, 1.0).spike_ratio, 0.0);
  // The window holds 19 x 2.0 and one 50.0 (mean 4.4): 6.0 is 1.36x, not a spike.
  EXPECT_EQ(watch.observe(6.0, 1.0).spike_ratio, 0.0);
  // Now 18 x 2.0, 50.0 and 6.0 (mean 4.6): 7.0 is 1.52x and 2.4 nats above.
  const LossWatch::Verdict spike = watch.observe(7.0, 1.0);
  EXPECT_DOUBLE_EQ(spike.recent_mean, 4.6);
  EXPECT_DOUBLE_EQ(spike.spike_ratio, 7.0 / 4.6);
  EXPECT_TRUE(spike.finite);
  EXPECT_NE(spike.warning.find("loss 7.0000 is 1.5x the mean of the last 20 steps (4.6000)"), std::string::npos)
      << spike.warning;
}

TEST(LossWatch, SmallLossesNeedHalfANatToSpike) {
  LossWatch watch;
  for (int i = 0; i < 20; ++i) watch.observe(0.1, 1.0);
  EXPECT_EQ(watch.observe(0.3, 1.0).spike_ratio, 0.0);  // 3x, but 0.2 nats above
  EXPECT_GT(watch.observe(0.7, 1.0).spike_ratio, 0.0);  // mean now 0.11: 0.59 nats above
}

TEST(LossWatch, NotFiniteStepsStayOutOfTheWindow) {
  LossWatch watch;
  for (int i = 0; i < 20; ++i) watch.observe(2.0, 1.0);
  EXPECT_FALSE(watch.observe(std::nan(""), 1.0).finite);
  EXPECT_DOUBLE_EQ(watch.observe(4.0, 1.0).recent_mean, 2.0);
}

}  // namespace
}  // namespace st
