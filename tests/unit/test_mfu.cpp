// MFU against its yardstick, and the note that explains MFU above 100%.
#include <gtest/gtest.h>

#include "train/mfu.hpp"

namespace st {
namespace {

TEST(MfuYardstick, MfuIsTheModelRateOverTheMeasuredRate) {
  const MfuYardstick host(80e9, false, false);
  EXPECT_DOUBLE_EQ(host.mfu(20e9), 0.25);
  EXPECT_DOUBLE_EQ(host.mfu(120e9), 1.5);
  EXPECT_EQ(host.description(), "80.0 GFLOP/s per rank");
  EXPECT_EQ(MfuYardstick(1.5e12, true, true).description(), "1500.0 GFLOP/s per rank (GPU GEMM, bf16 inputs)");
  EXPECT_EQ(MfuYardstick(1.5e12, true, false).description(), "1500.0 GFLOP/s per rank (GPU GEMM, fp32)");
}

TEST(MfuYardstick, AboveOneHundredPercentComesWithItsNoteOnce) {
  MfuYardstick yardstick(42.5e9, false, false);
  EXPECT_EQ(yardstick.note_for(0.4), "");
  EXPECT_EQ(yardstick.note_for(1.0), "");  // exactly the yardstick: nothing to explain
  const std::string note = yardstick.note_for(1.07);
  EXPECT_NE(note.find("MFU above 100%"), std::string::npos) << note;
  EXPECT_NE(note.find("sgemm rate measured before step 0 (42.5 GFLOP/s)"), std::string::npos) << note;
  EXPECT_NE(note.find("tokens/s is the figure to compare"), std::string::npos) << note;
  EXPECT_EQ(yardstick.note_for(1.3), "") << "said once per run";
  MfuYardstick gpu(900e9, true, false);
  EXPECT_NE(gpu.note_for(2.0).find("the GEMM rate measured"), std::string::npos);
}

}  // namespace
}  // namespace st
