#include "train/mfu.hpp"

#include "comm/group.hpp"
#include "comm/values.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "exec/gemm_rate.hpp"
#include "model/deck_shape.hpp"

namespace st {

MfuYardstick MfuYardstick::measure(const Execution& execution, const BatchPlan& batch_plan, const ModelConfig& model,
                                   bool bf16, MPI_Comm comm) {
  // Every rank of the node measures at once, as they will compute during training.
  barrier(comm);
  const int m = static_cast<int>(batch_plan.micro_batch * model.seq_len);
  const int n = static_cast<int>(model_shape(model).widest_linear()), k = static_cast<int>(model.d_model);
  const std::optional<double> device_rate = execution.matmul_rate(m, n, k);
  const double rate = min_over(device_rate ? *device_rate : measure_sgemm_flops(m, n, k), comm);
  const bool gpu = device_rate.has_value();
  // The datasheet peak where every rank's GPU is in the table (0 stands for "not known"), the
  // lowest of them: MFU against the slowest device, as the measured rate is the slowest rank's.
  std::optional<PeakFlops> peak = gpu ? datasheet_peak(execution.device_name(), bf16) : std::nullopt;
  const double lowest = min_over(peak ? peak->flops : 0.0, comm);
  if (lowest <= 0) return MfuYardstick(rate, gpu, bf16);
  if (peak->flops != lowest) peak = PeakFlops{lowest, "the slowest rank's GPU"};
  return MfuYardstick(rate, gpu, bf16, peak);
}

std::string MfuYardstick::description() const {
  return format_fixed(rate_ / 1e9, 1) + " GFLOP/s per rank" +
         (gpu_ ? (bf16_ ? " (GPU GEMM, bf16 inputs)" : " (GPU GEMM, fp32)") : "");
}

std::string MfuYardstick::yardstick_description() const {
  if (peak_) return format_fixed(peak_->flops / 1e12, 1) + " TFLOP/s per GPU, the datasheet peak (" + peak_->label + ")";
  return std::string("the measured ") + (gpu_ ? "GEMM" : "sgemm") + " rate" +
         (gpu_ ? " (no datasheet peak is known for this GPU)" : "");
}

std::string MfuYardstick::note_for(double mfu) {
  if (mfu <= 1.0 || noted_) return "";
  noted_ = true;
  if (peak_)
    return "note: MFU above 100% of the datasheet peak (" + format_fixed(peak_->flops / 1e12, 1) + " TFLOP/s, " +
           peak_->label + ") cannot be: the device is not the one the table names. tokens/s is the figure to compare.";
  return "note: MFU above 100% means the yardstick, the " + std::string(gpu_ ? "GEMM" : "sgemm") +
         " rate measured before step 0 (" + format_fixed(rate_ / 1e9, 1) +
         " GFLOP/s), was low: something else ran on these cores while it was measured. MFU is relative to it; "
         "tokens/s is the figure to compare.";
}

}  // namespace st
