// MFU against its yardstick (a GPU's datasheet peak, else the measured rate), the peak table,
// the step line that prints both, and the note that explains MFU above 100%.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "train/mfu.hpp"
#include "train/peak_flops.hpp"
#include "train/report.hpp"

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

// The names are the CUDA runtime's (cudaDeviceProp::name) for each card; the figures NVIDIA's
// datasheets' dense ones.
TEST(DatasheetPeak, NamesTheDenseRateAtTheRunsPrecision) {
  const auto h200 = datasheet_peak("NVIDIA H200", true);
  ASSERT_TRUE(h200.has_value());
  EXPECT_DOUBLE_EQ(h200->flops, 989e12);
  EXPECT_EQ(h200->label, "H200 SXM, bf16 dense");
  EXPECT_DOUBLE_EQ(datasheet_peak("NVIDIA H200", false)->flops, 67e12) << "fp32 without TF32: the CUDA cores";
  EXPECT_DOUBLE_EQ(datasheet_peak("NVIDIA H100 80GB HBM3", true)->flops, 989e12);
  EXPECT_DOUBLE_EQ(datasheet_peak("NVIDIA H100 PCIe", true)->flops, 756e12) << "PCIe before the SXM row";
  EXPECT_DOUBLE_EQ(datasheet_peak("NVIDIA H100 NVL", true)->flops, 835e12);
  EXPECT_DOUBLE_EQ(datasheet_peak("NVIDIA H200 NVL", true)->flops, 835e12) << "NVL before the SXM row";
  EXPECT_DOUBLE_EQ(datasheet_peak("NVIDIA GH200 480GB", true)->flops, 989e12);
  EXPECT_DOUBLE_EQ(datasheet_peak("NVIDIA A100-SXM4-80GB", true)->flops, 312e12);
  EXPECT_DOUBLE_EQ(datasheet_peak("NVIDIA A100-SXM4-80GB", false)->flops, 19.5e12);
  EXPECT_FALSE(datasheet_peak("NVIDIA GeForce RTX 4090", true).has_value());
  EXPECT_FALSE(datasheet_peak("", true).has_value()) << "the host has no peak";
}

TEST(MfuYardstick, OnAGpuInTheTableMfuIsAgainstThePeakWithTheMeasuredGemmBeside) {
  // A bf16 GEMM measured at 600 TFLOP/s on an H200; the model runs at 395.6 TFLOP/s.
  const MfuYardstick gpu(600e12, true, true, datasheet_peak("NVIDIA H200", true));
  EXPECT_DOUBLE_EQ(gpu.mfu(395.6e12), 0.4);
  EXPECT_NEAR(gpu.of_measured(395.6e12), 0.659333, 1e-6);
  EXPECT_EQ(gpu.yardstick_description(), "989.0 TFLOP/s per GPU, the datasheet peak (H200 SXM, bf16 dense)");
  EXPECT_EQ(gpu.description(), "600000.0 GFLOP/s per rank (GPU GEMM, bf16 inputs)");
  // Not in the table: against the measured rate, saying so; nothing printed beside it.
  const MfuYardstick other(100e12, true, true);
  EXPECT_DOUBLE_EQ(other.mfu(40e12), 0.4);
  EXPECT_EQ(other.of_measured(40e12), 0.0);
  EXPECT_EQ(other.yardstick_description(), "the measured GEMM rate (no datasheet peak is known for this GPU)");
  EXPECT_EQ(MfuYardstick(80e9, false, false).yardstick_description(), "the measured sgemm rate");
}

TEST(StepLine, PrintsMfuAgainstThePeakAndTheMeasuredGemmBeside) {
  const MfuYardstick gpu(600e12, true, true, datasheet_peak("NVIDIA H200", true));
  StepRecord r;
  r.step = 3;
  r.steps = 20;
  r.seconds = 0.5;
  r.tokens_per_second = 32768;
  r.mfu = gpu.mfu(395.6e12);
  r.mfu_of_measured_gemm = gpu.of_measured(395.6e12);
  const std::string line = step_line(r);
  EXPECT_NE(line.find("| MFU 40.0% (66% of GEMM) |"), std::string::npos) << line;
  EXPECT_DOUBLE_EQ(step_metrics(r)["mfu"].get<double>(), 0.4);
  EXPECT_NEAR(step_metrics(r)["mfu_of_measured_gemm"].get<double>(), 0.659333, 1e-6);
  // The host: MFU against the measured sgemm alone.
  r.mfu = 0.55;
  r.mfu_of_measured_gemm = 0;
  EXPECT_NE(step_line(r).find("| MFU 55.0% | comm"), std::string::npos) << step_line(r);
  EXPECT_FALSE(step_metrics(r).contains("mfu_of_measured_gemm"));
}

}  // namespace
}  // namespace st
