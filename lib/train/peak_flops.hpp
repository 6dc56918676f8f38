#pragma once
// The datasheet's dense peak of a GPU at a run's matmul precision: the yardstick other trainers
// (llm.c, torchtitan, Megatron) print GPU MFU against, so that shardtrain's MFU reads the same
// for the same speed. A GEMM measured in the run is not: with bf16 it reaches well under the
// peak, and MFU against it would read higher than theirs.
#include <optional>
#include <string>
#include <string_view>

namespace st {

struct PeakFlops {
  double flops = 0;    // FLOP/s, dense (no 2:4 sparsity)
  std::string label;   // "H100/H200 SXM, bf16 dense"
};

// The peak of the GPU that the CUDA runtime names `device_name` (cudaDeviceProp::name, e.g.
// "NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB") for matmuls with bf16
// inputs and fp32 accumulation (bf16) or plain fp32 (no TF32: the fp32 setting's cuBLAS math
// mode), from NVIDIA's datasheets; nothing for a device not in the table.
std::optional<PeakFlops> datasheet_peak(std::string_view device_name, bool bf16);

}  // namespace st
