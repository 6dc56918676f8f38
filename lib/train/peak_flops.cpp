#include "train/peak_flops.hpp"

#include <array>

namespace st {
namespace {

struct Row {
  std::string_view name_part;  // matched as a substring of the runtime's device name, in table order
  std::string_view label;
  double bf16_tflops, fp32_tflops;
};

// NVIDIA's datasheet figures, dense (the datasheets' bf16 headline is with 2:4 sparsity: half of
// it is the dense rate). fp32 is the CUDA cores' rate: the fp32 setting keeps TF32 off. More
// specific names come first ("H100 NVL" before "H100").
constexpr std::array kTable{
    Row{"H200 NVL", "H200 NVL", 835.0, 60.0},
    Row{"GH200", "GH200", 989.0, 67.0},
    Row{"H200", "H200 SXM", 989.0, 67.0},
    Row{"H100 NVL", "H100 NVL", 835.0, 60.0},
    Row{"H100 PCIe", "H100 PCIe", 756.0, 51.0},
    Row{"H100", "H100 SXM", 989.0, 67.0},
    Row{"A100", "A100", 312.0, 19.5},
};

}  // namespace

std::optional<PeakFlops> datasheet_peak(std::string_view device_name, bool bf16) {
  for (const Row& row : kTable)
    if (device_name.find(row.name_part) != std::string_view::npos)
      return PeakFlops{(bf16 ? row.bf16_tflops : row.fp32_tflops) * 1e12,
                       std::string(row.label) + (bf16 ? ", bf16 dense" : ", fp32")};
  return std::nullopt;
}

}  // namespace st
